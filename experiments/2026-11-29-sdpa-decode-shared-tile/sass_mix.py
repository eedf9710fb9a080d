import re, sys, collections
def funcs(path):
    cur=None; out={}
    for line in open(path):
        m=re.search(r'Function : (\S+)', line)
        if m: cur=m.group(1); out[cur]=[]; continue
        m=re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
        if m and cur: out[cur].append((int(m.group(1),16), m.group(2).strip()))
    return out
def loop(ins):
    best=None
    for a,t in ins:
        m=re.search(r'BRA\s+(?:\S+\s+)?`?\(?\.?L?_?x?_?(\w*)\)?', t)
        mm=re.search(r'BRA.*?0x([0-9a-f]+)', t)
        if mm:
            tgt=int(mm.group(1),16)
            if tgt<a:
                body=[x for b,x in ins if tgt<=b<=a]
                n=sum('HMMA' in x for x in body)
                if n and (best is None or n>best[0]): best=(n,tgt,a,body)
    return best
cats=[('decode F2FP(E4M3)',lambda o:o.startswith('F2FP') and 'E4M3' in o),('PRMT',lambda o:o.startswith('PRMT')),
('LDS',lambda o:o.startswith('LDS') and not o.startswith('LDSM')),('LDSM',lambda o:o.startswith('LDSM')),('STS',lambda o:o.startswith('STS')),
('LDGSTS',lambda o:o.startswith('LDGSTS')),('HMMA',lambda o:o.startswith('HMMA')),('BAR',lambda o:o.startswith('BAR')),
('MUFU',lambda o:o.startswith('MUFU'))]
for path in sys.argv[1:]:
    F=funcs(path)
    for name in sorted(F):
        if 'sdpa_decode_fp16_kernelILi128' not in name and 'sdpa_decode_fp16_kernelILi64' not in name: continue
        b=loop(F[name]); 
        if not b: print(path,name,'no loop'); continue
        n,t,a,body=b
        ops=[re.sub(r'^@!?U?P\w+\s+','',x).split()[0] for x in body]
        c=collections.Counter()
        for o in ops:
            for k,f in cats:
                if f(o): c[k]+=1
        wm=re.search(r'ILi(\d+)ELi(\d)',name).groups()
        print(f"{path.split('/')[-1]:14s} D{wm[0]} WM{wm[1]} loop {len(body)} instr: "+", ".join(f"{k} {c[k]}" for k,_ in cats))
