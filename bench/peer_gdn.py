#!/usr/bin/env python3
"""The peer of build/gdn_rate --rule chunked: flash-linear-attention's chunk_gated_delta_rule (package
fla-core, `from fla.ops.gated_delta_rule import chunk_gated_delta_rule`), timed at the same shapes and
lengths: Qwen3.5-9B's linear layer (16 key heads, 32 value heads, 128 x 128) and 27B's (16, 48), one
sequence of 8K to 128K tokens, bf16 q, k, v, fp32 g (the log-decay) and beta, q and k l2-normalised in
the kernel (use_qk_l2norm_in_kernel, as our rule's prepared q and k), scale 1/sqrt(dk). FLA runs its
Triton kernels (FLA_FLASH_QLA=0 keeps its FlashQLA backend off, which would need another package).

  python3 bench/peer_gdn.py --seq 8192 32768 131072 --hv 32 48
  python3 bench/peer_gdn.py --device cpu      # checks the script without a GPU (FLA skipped)

Per case: the forward (with autograd recording, as in training) and the backward from a random dO,
each the median of --iters calls after --warmup calls, timed with CUDA events. One JSON line per case,
with the FLOPs that build/gdn_rate counts (docs/chunked_delta_rule.md §10: the chunked algorithm's
matrix products, 2 FLOPs a multiply-add) and the rate they make; an error (out of memory, FLA missing)
is a line of its own and does not hide the other cases.

--device cpu runs a tiny case through a plain torch recurrence with autograd instead (FLA's kernels are
Triton, GPU only), timed with perf_counter: it checks the argument handling, the timing and the JSON,
and says whether fla imports.
"""
import argparse, json, os, statistics, sys, time

os.environ.setdefault("FLA_FLASH_QLA", "0")


def chunk_macs(which, C, dk, dv):
    """multiply-adds of one chunk of C tokens and one value head (bench/gdn_rate.c's chunk_macs)"""
    kk = qk = C * C * dk
    uw, ws, dks, qs, pd = C * C * (dv + dk), C * dk * dv, C * dv * dk, C * dk * dv, C * C * dv
    if which == "forward":
        return kk + qk + uw + ws + dks + qs + pd
    return (kk + qk + uw + ws + (C * dk * dv + C * C * dv) + 2 * C * dv * dk + (C * C * dv + C * dv * dk + C * C * dk)
            + (C * C * dk + C * dv * dk) + C * dv * dk + C * C * (dv + dk) + C * C * (dv + dk) + 2 * C * C * dk)


def flops(which, S, Hv, dk, dv):
    return 2.0 * ((S + 63) // 64) * Hv * chunk_macs(which, 64, dk, dv)


def recurrent_reference(q, k, v, g, beta):
    """the rule token by token in torch (the CPU check's stand-in for FLA): q, k [B,T,Hk,K] raw, v [B,T,Hv,V],
    g, beta [B,T,Hv]; q, k l2-normalised, q scaled by K^-1/2, repeated over the value heads"""
    import torch
    import torch.nn.functional as F
    B, T, Hk, K = q.shape
    Hv, V = v.shape[2], v.shape[3]
    rep = Hv // Hk
    qn = F.normalize(q.float(), dim=-1).repeat_interleave(rep, dim=2) * K ** -0.5
    kn = F.normalize(k.float(), dim=-1).repeat_interleave(rep, dim=2)
    S = torch.zeros(B, Hv, V, K, dtype=torch.float32, device=q.device)
    outs = []
    for t in range(T):
        a = g[:, t].float().exp()[..., None, None]
        kt, qt, vt, bt = kn[:, t], qn[:, t], v[:, t].float(), beta[:, t].float()[..., None]
        S = a * S
        u = torch.einsum("bhvk,bhk->bhv", S, kt)
        S = S + torch.einsum("bhv,bhk->bhvk", bt * (vt - u), kt)
        outs.append(torch.einsum("bhvk,bhk->bhv", S, qt))
    return torch.stack(outs, dim=1)


def make_inputs(torch, S, Hk, Hv, dk, dv, dev, dtype):
    gen = torch.Generator(device="cpu").manual_seed(0)
    def rn(*shape):
        return torch.randn(*shape, generator=gen).to(dev)
    q = rn(1, S, Hk, dk).to(dtype).requires_grad_()
    k = rn(1, S, Hk, dk).to(dtype).requires_grad_()
    v = rn(1, S, Hv, dv).to(dtype).requires_grad_()
    g = (-(0.01 + 0.29 * torch.rand(1, S, Hv, generator=gen))).to(dev).requires_grad_()
    beta = (0.05 + 0.9 * torch.rand(1, S, Hv, generator=gen)).to(dev).requires_grad_()
    do = rn(1, S, Hv, dv).to(dtype)
    return q, k, v, g, beta, do


def time_case(torch, fn, inputs, do, iters, warmup, cuda):
    def timed(f):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); r = f(); e1.record(); torch.cuda.synchronize()
            return r, e0.elapsed_time(e1)
        t0 = time.perf_counter(); r = f(); return r, 1e3 * (time.perf_counter() - t0)
    fwd, bwd, bwd_error = [], [], None
    for i in range(warmup + iters):
        for x in inputs:
            x.grad = None
        o, tf = timed(lambda: fn(*inputs))
        if bwd_error is None:  # a backward that refuses (FLA on some Triton builds) leaves the forward timed
            try:
                _, tb = timed(lambda: o.backward(do))
                if i >= warmup:
                    bwd.append(tb)
            except Exception as e:
                bwd_error = f"{type(e).__name__}: {str(e)[:300]}"
        if i >= warmup:
            fwd.append(tf)
        del o
    return statistics.median(fwd), (statistics.median(bwd) if bwd else None), bwd_error


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[8192, 16384, 32768, 65536, 131072])
    ap.add_argument("--hk", type=int, default=16)
    ap.add_argument("--hv", type=int, nargs="+", default=[32, 48])
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--dv", type=int, default=128)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": f"torch is not installed: {e}"}))
        return 1
    cuda = a.device == "cuda"
    fla_version, fla_error, fn = None, None, None
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        fla_version = getattr(fla, "__version__", "?")
        def fn(q, k, v, g, beta):
            o, _ = chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=False)
            return o
    except Exception as e:  # not installed, or no Triton
        fla_error = f"{type(e).__name__}: {e}"
    if not cuda:  # the script's check: a tiny case through the torch recurrence
        a.seq, a.hk, a.hv, a.dk, a.dv, a.iters, a.warmup = [64], 2, [4], 16, 16, 2, 1
        fn, impl = (lambda q, k, v, g, beta: recurrent_reference(q, k, v, g, beta)), "torch recurrence (cpu check)"
    else:
        impl = "fla chunk_gated_delta_rule"
        if fn is None:
            print(json.dumps({"impl": impl, "error": f"fla does not import: {fla_error}"}))
            return 1
    name = torch.cuda.get_device_name() if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    bad = 0
    for hv in a.hv:
        for S in a.seq:
            rec = {"impl": impl, "fla": fla_version, "device": name, "S": S, "Hk": a.hk, "Hv": hv, "dk": a.dk, "dv": a.dv}
            if not cuda:
                rec["fla_import"] = fla_error or "ok"
            try:
                q, k, v, g, beta, do = make_inputs(torch, S, a.hk, hv, a.dk, a.dv, a.device, dtype)
                tf, tb, bwd_error = time_case(torch, fn, (q, k, v, g, beta), do, a.iters, a.warmup, cuda)
                ff, fb = flops("forward", S, hv, a.dk, a.dv), flops("backward", S, hv, a.dk, a.dv)
                rec.update({"fwd_ms": round(tf, 4), "fwd_flop": ff, "fwd_tflops": round(ff / (tf * 1e-3) / 1e12, 2)})
                if tb is not None:
                    rec.update({"bwd_ms": round(tb, 4), "bwd_flop": fb, "bwd_tflops": round(fb / (tb * 1e-3) / 1e12, 2)})
                else:
                    rec["bwd_error"] = bwd_error
                    bad += 1
                if cuda:
                    rec["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                del q, k, v, g, beta, do
            except Exception as e:  # out of memory at one length must not hide the others
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                bad += 1
            if cuda:
                torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
            print(json.dumps(rec), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
