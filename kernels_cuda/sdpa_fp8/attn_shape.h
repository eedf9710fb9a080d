// The attention case every kernel of the runner takes (since 2026-11-28): query heads in groups over K/V heads,
// a query length that may differ from the key length, and a bottom-right aligned causal mask.
//
//   Q, O [B, Hq, Sq, D] fp16;  K, V [B, Hkv, Skv, D] uint8 E4M3 codes;  Hq = G * Hkv (G = 1: MHA, Hkv = 1: MQA)
//   query head h reads K/V head h / G;  causal: query row i sees keys j <= i + Skv - Sq (FlashAttention >= 2.1,
//   inference engines; torch's `is_causal=True` is top-left aligned when Sq != Skv).  With causal on, Sq <= Skv:
//   a row i < Sq - Skv would see no key, and the runner refuses such a case (exit 2) before any launch.
//
// Element counts and offsets are 64-bit: K and V may hold more than 2^31 elements each (B = 64, Hkv = 8,
// Skv = 32768, D = 128 is 2^31 exactly).
#pragma once

#include <cstdint>

struct AttnShape {
    int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Skv = 0, D = 0;
    bool causal = false;

    int64_t group() const { return Hkv > 0 ? Hq / Hkv : 0; }                // query heads per K/V head
    int64_t q_elems() const { return B * Hq * Sq * D; }                       // Q and O
    int64_t kv_elems() const { return B * Hkv * Skv * D; }                    // K and V each
    // The case the kernels served before 2026-11-28: square, non-causal, one K/V head per query head.
    bool square_mha() const { return Hq == Hkv && Sq == Skv && !causal; }
    // Keys row i of Q sees: all Skv, or with causal on i + 1 + Skv - Sq (>= 1 since Sq <= Skv).
    int64_t keys_of_row(int64_t i) const { return causal ? i + 1 + Skv - Sq : Skv; }
};
