// Minimal .npy reader/writer (format versions 1.0 / 2.0 / 3.0 read, 1.0 written),
// little-endian, C order only.  Host-only, no dependencies beyond the C++ standard library.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace npy {

struct Array {
    std::string descr;           // e.g. "<f2", "|u1", "<f4"
    std::vector<int64_t> shape;  // () for a scalar
    std::vector<unsigned char> data;

    int64_t count() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
};

// Item size of the descriptors this project uses; 0 for anything else.
inline size_t itemsize(const std::string& descr) {
    if (descr == "<f2") return 2;
    if (descr == "|u1" || descr == "<u1" || descr == "u1" || descr == "|i1") return 1;
    if (descr == "<f4") return 4;
    if (descr == "<f8") return 8;
    return 0;
}

namespace detail {
inline bool find_value(const std::string& h, const char* key, std::string::size_type* pos) {
    std::string k1 = std::string("'") + key + "'";
    auto p = h.find(k1);
    if (p == std::string::npos) return false;
    p = h.find(':', p + k1.size());
    if (p == std::string::npos) return false;
    ++p;
    while (p < h.size() && h[p] == ' ') ++p;
    *pos = p;
    return true;
}
}  // namespace detail

// Returns an empty string on success, else a reason.  The header is read first, then the data straight into
// `out->data` (one copy from the file: inputs of several GiB, decode at B 64 with Skv 32K, load in one pass).
inline std::string load(const std::string& path, Array* out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return "cannot open " + path;
    struct Closer {
        FILE* f;
        ~Closer() { std::fclose(f); }
    } closer{f};
    unsigned char pre[12];
    const size_t got = std::fread(pre, 1, sizeof pre, f);
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (got < 10 || std::memcmp(pre, magic, 6) != 0) return path + ": not an .npy file";
    const int major = pre[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (got < 12) return path + ": truncated header";
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24);
        hstart = 12;
    } else {
        return path + ": unsupported .npy version " + std::to_string(major);
    }
    if (hlen > ((size_t)1 << 24)) return path + ": truncated header";
    std::string h(hlen, '\0');
    if (std::fseek(f, (long)hstart, SEEK_SET) != 0 || std::fread(&h[0], 1, hlen, f) != hlen)
        return path + ": truncated header";

    std::string::size_type p;
    // descr
    if (!detail::find_value(h, "descr", &p) || p >= h.size() || (h[p] != '\'' && h[p] != '"'))
        return path + ": header has no 'descr'";
    {
        const char q = h[p];
        auto e = h.find(q, p + 1);
        if (e == std::string::npos) return path + ": malformed 'descr'";
        out->descr = h.substr(p + 1, e - p - 1);
    }
    // fortran_order
    if (!detail::find_value(h, "fortran_order", &p)) return path + ": header has no 'fortran_order'";
    if (h.compare(p, 5, "False") != 0) {
        if (h.compare(p, 4, "True") == 0) return path + ": fortran_order arrays are not supported";
        return path + ": malformed 'fortran_order'";
    }
    // shape
    if (!detail::find_value(h, "shape", &p) || p >= h.size() || h[p] != '(') return path + ": header has no 'shape'";
    {
        auto e = h.find(')', p);
        if (e == std::string::npos) return path + ": malformed 'shape'";
        out->shape.clear();
        std::string s = h.substr(p + 1, e - p - 1);
        size_t i = 0;
        while (i < s.size()) {
            while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
            if (i >= s.size()) break;
            if (s[i] < '0' || s[i] > '9') return path + ": malformed 'shape'";
            int64_t v = 0;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
                v = v * 10 + (s[i] - '0');
                if (v > (int64_t(1) << 40)) return path + ": dimension too large";
                ++i;
            }
            out->shape.push_back(v);
        }
    }
    const size_t isz = itemsize(out->descr);
    if (isz == 0) return path + ": unsupported dtype '" + out->descr + "'";
    const size_t need = (size_t)out->count() * isz;
    // The data's size from the file's size: the data is whatever follows the header.
    if (std::fseek(f, 0, SEEK_END) != 0) return "cannot read " + path;
    const long end = std::ftell(f);
    const size_t data_at = hstart + hlen;
    if (end < 0 || std::fseek(f, (long)data_at, SEEK_SET) != 0) return "cannot read " + path;
    const size_t have = (size_t)end > data_at ? (size_t)end - data_at : 0;
    if (have != need)
        return path + ": data size " + std::to_string(have) + " bytes does not match header (" + std::to_string(need) +
               " bytes)";
    out->data.resize(need);
    if (need && std::fread(out->data.data(), 1, need, f) != need) {
        out->data.clear();
        return "cannot read " + path;
    }
    return "";
}

// Write a C-order little-endian array with a version 1.0 header. Empty string on success.
inline std::string save(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                        const void* data, size_t nbytes) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]);
        if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
        if (i + 1 < shape.size()) dict += " ";
    }
    dict += "), }";
    size_t total = 10 + dict.size() + 1;  // + '\n'
    const size_t pad = (64 - total % 64) % 64;
    dict.append(pad, ' ');
    dict += '\n';
    if (dict.size() > 65535) return "header too long";
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(dict.size() & 0xff),
                             (unsigned char)(dict.size() >> 8)};
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return "cannot open " + path + " for writing";
    bool ok = std::fwrite(pre, 1, 10, f) == 10;
    ok = ok && std::fwrite(dict.data(), 1, dict.size(), f) == dict.size();
    ok = ok && std::fwrite(data, 1, nbytes, f) == nbytes;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return "cannot write " + path;
    return "";
}

}  // namespace npy
