#!/usr/bin/env python3
"""Write the logging stubs of every GPU entry point a stage calls (tests/calls/fake_cuda.c says why):
the kernel launchers of kernels/kernels.h, the GEMMs of common/gemm.h and the attention calls of
common/sdpa.h, read from TREE's headers.
    python3 tests/calls/gen_stubs.py TREE > stubs.c
Kernel launchers are defined (the .cu objects are not linked); the GEMM and attention entry points
are wrapped (-Wl,--wrap=NAME: gemm.c's and sdpa.c's host logic stays, their calls into cuBLASLt and
cuDNN are never reached). The names to wrap are printed by `gen_stubs.py TREE --wrap`."""
import re
import sys

# sdpa.h's entry points that reach cuDNN; the rest of sdpa.c (plans of blocks, shapes) is host logic
SDPA = {"sdpa_init", "sdpa_destroy", "sdpa_fwd_workspace", "sdpa_bwd_workspace", "sdpa_fwd", "sdpa_bwd",
        "sdpa_fwd_padded", "sdpa_bwd_padded", "sdpa_blocks_fwd", "sdpa_blocks_bwd", "sdpa_packed_fwd",
        "sdpa_packed_bwd", "sdpa_zero_slack"}
GEMM = {"gemm_init", "gemm_destroy", "linear_fwd", "linear_fwd_add", "linear_dx", "linear_dw", "linear_fwd_grouped",
        "linear_dx_grouped"}
# the launchers' host functions that return what the host uses
# the local communicator's reductions compute (its ranks read what the others posted); the rest of
# the kernels write nothing
BODIES = {"sum_slices_f32": "for (int64_t i = 0; i < n; i++) { float a = 0; for (int q = 0; q < s.n; q++) "
                            "a += ((const float *)s.p[q])[offset + i]; out[i] = a * scale; }",
          "sum_slices_f64": "for (int64_t i = 0; i < n; i++) { double a = 0; for (int q = 0; q < s.n; q++) "
                            "a += ((const double *)s.p[q])[i]; out[i] = a; }",
          "scale_f32": "for (int64_t i = 0; i < n; i++) x[i] *= scale;",
          "scale_f64": "for (int64_t i = 0; i < n; i++) x[i] *= scale;"}
RETURNS = {"gdn_scratch_floats": "return Hv * dv * chunk * dk;",
           "sdpa_fwd_workspace": "return 0;", "sdpa_bwd_workspace": "return 0;"}


def prototypes(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#.*", "", text)
    text = re.sub(r"typedef struct \{.*?\}\s*\w+;", "", text, flags=re.S)
    while "static inline" in text:  # header-defined helpers: their bodies are not entry points
        i = text.index("static inline")
        j = text.index("{", i)
        depth, k = 0, j
        while True:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        text = text[:i] + text[k:]
    text = re.sub(r"extern \"C\" \{|^\}", "", text, flags=re.M)
    for stmt in text.split(";"):
        m = re.fullmatch(r"\s*((?:const\s+)?[\w\s\*]+?)\b(\w+)\s*\((.*)\)\s*", stmt, flags=re.S)
        if not m:
            continue
        ret, name, params = m.group(1).strip(), m.group(2), " ".join(m.group(3).split())
        if ret.startswith(("typedef", "static", "return")) or not ret:
            continue
        yield ret, name, params


def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            out.append(cur.strip()); cur = ""; continue
        depth += ch == "("; depth -= ch == ")"; cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [] if out == ["void"] else out


def pname(p):
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)  # function pointer
    return m.group(1) if m else re.findall(r"\w+", p)[-1]


def emit(ret, name, params, wrapped):
    ps = split_params(params)
    fn = ("__wrap_" if wrapped else "") + name
    lines = [f"{ret} {fn}({params}) {{"]
    fmt, args, pre, post = [], [], [], []
    for i, p in enumerate(ps):
        n = pname(p)
        if "(*" in p:  # sdpa_blocks_bwd's kv_ready: called, as the real one calls it
            post.append(f"    if ({n}) {n}(ctx);")
            continue
        t = p[: p.rfind(n)].strip()
        if re.search(r"\b(Gemm|Sdpa)\s*\*", t):
            if name in ("gemm_init",):
                pre.append(f"    memset({n}, 0, sizeof *{n});")
            if name in ("sdpa_init",):
                pre.append(f"    memset({n}, 0, sizeof *{n});")
            continue
        if "SdpaShape" in t:
            fmt.append(f"{n}={{%lld %lld %lld %lld %lld c%d br%d pad%d}}")
            args += [f"(long long){n}->{f}" for f in ("Hq", "Hkv", "Sq", "Skv", "D")] + [
                f"{n}->causal", f"{n}->bottom_right", f"{n}->padded"]
            continue
        if "SdpaBlocks" in t:
            pre.append(f"    char blocks[8192]; size_t bo = 0; blocks[0] = 0;\n"
                       f"    for (int64_t i = 0; i < {n}->n && bo < sizeof blocks - 64; i++)\n"
                       f"        bo += (size_t)snprintf(blocks + bo, sizeof blocks - bo, \" [%lld %lld %lld %lld %d]\", "
                       f"(long long){n}->b[i].q0, (long long){n}->b[i].nq, (long long){n}->b[i].k0, "
                       f"(long long){n}->b[i].nk, {n}->b[i].causal);\n"
                       f"    char blens[512];")
            fmt.append(f"{n}={{n%lld%s lens %s}}")
            args += [f"(long long){n}->n", "blocks", f"calls_ptr({n}->lens, blens, sizeof blens)"]
            continue
        if "SlicePtrs" in t:
            pre.append(f"    char sl[2048]; size_t so = 0; sl[0] = 0;\n"
                       f"    for (int i = 0; i < {n}.n; i++) {{ char b[512]; "
                       f"so += (size_t)snprintf(sl + so, sizeof sl - so, \" %s\", calls_ptr({n}.p[i], b, sizeof b)); }}")
            fmt.append(f"{n}={{%s}}")
            args.append("sl")
            continue
        if t == "cudaStream_t":
            pre.append(f"    char s_{i}[32];")
            fmt.append("%s")
            args.append(f"calls_stream({n}, s_{i}, sizeof s_{i})")
            continue
        if "*" in t:
            pre.append(f"    char p_{i}[1024];")
            fmt.append(f"{n}=%s")
            args.append(f"calls_ptr({n}, p_{i}, sizeof p_{i})")
            continue
        if t in ("float", "double"):
            fmt.append(f"{n}=%.9g")
            args.append(f"(double){n}")
            continue
        fmt.append(f"{n}=%lld")
        args.append(f"(long long){n}")
    lines += pre
    ticks = name in ("sdpa_blocks_fwd", "sdpa_blocks_bwd") and TICKS  # the ring check's marks, where sdpa.c makes them
    if ticks:
        lines.append("    blocks_tick(st, 0);")
    lines.append(f"    calls_log(\"{name} {' '.join(fmt)}\"{''.join(', ' + a for a in args)});")
    lines += post
    if ticks:
        lines.append("    blocks_tick(st, 1);")
    if name in BODIES:
        lines.append("    " + BODIES[name])
    if ret != "void":
        lines.append("    " + RETURNS.get(name, "return 0;"))
    lines.append("}")
    return "\n".join(lines)


TICKS = False


def main():
    global TICKS
    tree = sys.argv[1]
    TICKS = "blocks_tick" in open(f"{tree}/common/train.h").read()
    wrap_only = "--wrap" in sys.argv
    todo = [(f"{tree}/kernels/kernels.h", None, False), (f"{tree}/common/gemm.h", GEMM, True),
            (f"{tree}/common/sdpa.h", SDPA, True)]
    if wrap_only:
        names = []
        for path, keep, wrapped in todo:
            names += [n for _, n, _ in prototypes(path) if wrapped and n in keep]
        print(" ".join(names))
        return
    print("/* made by tests/calls/gen_stubs.py: never edit */")
    print('#include <stdio.h>\n#include <string.h>\n#include "kernels/kernels.h"\n#include "common/gemm.h"\n'
          '#include "common/sdpa.h"\n#include "common/train.h"\n#include "calls.h"\n')
    for path, keep, wrapped in todo:
        for ret, name, params in prototypes(path):
            if keep is not None and name not in keep:
                continue
            print(emit(ret, name, params, wrapped) + "\n")


main()
