#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into fuzz/corpus/<target>/.

The committed corpus also holds inputs the fuzzer found (named by their SHA-1);
rerun this only to change the seeds. Formats follow src/mlframework/core/StateBlob.hpp.
"""
import gzip
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent / "corpus"


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def blob(kind: str, version: int, payload: bytes) -> bytes:
    k = kind.encode()
    body = b"MLFW" + struct.pack("<HHH", 1, version, len(k)) + k + struct.pack("<Q", len(payload)) + payload
    return body + struct.pack("<Q", fnv1a(body))


def scale_state(scale=65536.0, since=0, consecutive=0, overflows=0, steps=0) -> bytes:
    return struct.pack("<fqqqq", scale, since, consecutive, overflows, steps)


def write(target: str, name: str, data: bytes) -> None:
    path = ROOT / target
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_bytes(data)


def state_blob_seeds() -> None:
    # flags, program length, program, blob
    def seed(name, flags, program, payload, kind="fuzz.Kind", version=1):
        write("state_blob", name, bytes([flags, len(program)]) + bytes(program) + blob(kind, version, payload))

    seed("seed-scale-state", 0, [7], scale_state(512.0, 7, 1, 4, 90))
    seed("seed-scale-state-f64", 1, [7, 5], scale_state(1.0, 0, 0, 0, 1) + struct.pack("<d", 2.5))
    seed("seed-every-field", 0, [0, 1, 2, 3, 4, 5, 6, 4],
         bytes([9]) + struct.pack("<IQqfd", 7, 1 << 40, -3, 0.5, -1e300) + b"abcd")
    seed("seed-empty-payload", 0, [], b"")
    seed("seed-wrong-kind", 1, [7], scale_state(), kind="fuzz.Other")
    seed("seed-insane-state", 1, [7], scale_state(-1.0, -5, 3, 2, 1))
    write("state_blob", "seed-truncated", bytes([0, 1, 7]) + blob("fuzz.Kind", 1, scale_state())[:20])


def scaler_state_seeds() -> None:
    # front-end (0 amp, 1 mixed, 2 fsdp manager), flags, step count, steps, blob
    def seed(name, front_end, flags, steps, data):
        write("scaler_state", name, bytes([front_end, flags, len(steps)]) + bytes(steps) + data)

    def amp_config(initial=65536.0, growth=2.0, backoff=0.5, interval=2000, lo=1.0, hi=16777216.0, hyst=1, on=1):
        return struct.pack("<fffqffqB", initial, growth, backoff, interval, lo, hi, hyst, on)

    steps = [0, 0, 1, 1, 0, 1, 0, 0, 0, 0]
    seed("seed-amp", 0, 0, steps, blob("amp.DynamicLossScaler", 1, amp_config() + scale_state(1024.0, 5, 0, 2, 40)))
    seed("seed-amp-hysteresis", 0, 0, steps,
         blob("amp.DynamicLossScaler", 1, amp_config(8.0, 4.0, 0.25, 2, 1.0, 64.0, 3, 1) + scale_state(8.0, 1, 2, 2, 3)))
    seed("seed-amp-bad-scale", 0, 1, steps,
         blob("amp.DynamicLossScaler", 1, amp_config() + scale_state(1e30, 0, 0, 0, 0)))
    mixed = "optimizers.mixed_precision.DynamicLossScaler"
    seed("seed-mixed", 1, 0, steps, blob(mixed, 1, scale_state(4096.0, 3, 0, 1, 9) + bytes([0])))
    seed("seed-mixed-fallback", 1, 0, steps, blob(mixed, 1, scale_state(1.0, 0, 10, 10, 10) + bytes([1])))
    seed("seed-mixed-big-counters", 1, 1, steps,
         blob(mixed, 1, scale_state(2.0, (1 << 63) - 1, 0, 0, (1 << 63) - 1) + bytes([0])))
    # Version 2 adds GrowthFactor, BackoffFactor and GrowthInterval (the blob's configuration wins).
    seed("seed-mixed-v2", 1, 0, steps,
         blob(mixed, 2, scale_state(4096.0, 3, 0, 1, 9) + bytes([0]) + struct.pack("<ffq", 4.0, 0.25, 3)))
    seed("seed-mixed-v2-bad-config", 1, 1, steps,
         blob(mixed, 2, scale_state(4096.0, 3, 0, 1, 9) + bytes([0]) + struct.pack("<ffq", 0.5, 2.0, 0)))
    manager = "distributed.fsdp.FSDPMixedPrecisionManager"
    seed("seed-fsdp", 2, 0, steps, blob(manager, 1, scale_state(2.0, 0, 0, 0, 0)))
    seed("seed-fsdp-late", 2, 0, steps, blob(manager, 1, scale_state(65536.0, 1999, 0, 7, 5000)))


def idx_seeds() -> None:
    # path (0 ParseIdx, 1 Gunzip + ParseIdx, 2 MakeSplit), cut for path 2, file bytes
    def idx(dims, data):
        return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)

    images = idx([2, 3, 3], [i * 14 for i in range(18)])
    labels = idx([2], [1, 9])
    write("idx", "seed-images", bytes([0, 0]) + images)
    write("idx", "seed-labels", bytes([0, 0]) + labels)
    write("idx", "seed-gzip", bytes([1, 0]) + gzip.compress(images, mtime=0))
    write("idx", "seed-split", bytes([2, len(images)]) + images + labels)
    write("idx", "seed-overflowing-dims", bytes([0, 0]) + idx([65536, 65536, 65536, 65536], []))
    write("idx", "seed-zero-dim", bytes([0, 0]) + idx([3, 0], []))
    write("idx", "seed-truncated-gzip", bytes([1, 0]) + gzip.compress(images, mtime=0)[:25])


def fsdp_checkpoint_seeds() -> None:
    # flags, truncated length (u16), edits (u16 offset, xor mask) ending with a zero mask
    def seed(name, flags, truncate, edits, tail=b""):
        body = bytes([flags]) + struct.pack("<H", truncate)
        for offset, mask in edits:
            body += struct.pack("<HB", offset, mask)
        write("fsdp_checkpoint", name, body + struct.pack("<HB", 0, 0) + tail)

    seed("seed-unchanged", 0, 0, [])
    seed("seed-resealed-unit-name", 1, 0, [(70, 0x20)])
    seed("seed-resealed-shard-size", 1, 0, [(90, 0x01)])
    seed("seed-resealed-world-size", 1, 0, [(48, 0x02)])
    seed("seed-truncated", 3, 60, [])
    seed("seed-appended", 5, 0, [], b"\x00" * 12)
    seed("seed-bit-flip-unsealed", 0, 0, [(100, 0x80)])


def fsdp_sharded_checkpoint_seeds() -> None:
    # flags, blob to damage, truncated length (u16), edits (u16 offset, xor mask) ending with a
    # zero mask. Offsets into the blob: payload from 52 (world 52, rank 56, strategy 60, step 61,
    # optimizer kind 69, option count 70, options 74 (five f64 for the fuzzer's AdamW), learning
    # rate 114, step count 122, state vectors 130, scaler flag 134, scaler length 135, scaler bytes
    # 143, then the units).
    def seed(name, flags, victim, truncate, edits, tail=b""):
        body = bytes([flags, victim]) + struct.pack("<H", truncate)
        for offset, mask in edits:
            body += struct.pack("<HB", offset, mask)
        write("fsdp_sharded_checkpoint", name, body + struct.pack("<HB", 0, 0) + tail)

    seed("seed-unchanged", 0, 0, 0, [])
    seed("seed-resealed-world-size", 1, 1, 0, [(52, 0x01)])
    seed("seed-resealed-rank", 1, 2, 0, [(56, 0x02)])
    seed("seed-resealed-step", 1, 1, 0, [(61, 0x01)])
    seed("seed-resealed-optimizer-kind", 1, 0, 0, [(69, 0x03)])
    seed("seed-resealed-option", 1, 0, 0, [(80, 0x10)])
    seed("seed-resealed-state-count", 1, 2, 0, [(130, 0x01)])
    seed("seed-resealed-scaler-length", 1, 0, 0, [(135, 0x04)])
    seed("seed-resealed-unit-region", 1, 1, 0, [(300, 0x01)])
    # Flag bit 5: the 8-bit model (one unit "blocks" of 192 elements, 64 per rank). Its blobs (784
    # bytes) hold the scaler bytes at 143-262, the unit from 263 (master values 356-611), then per
    # moment: present flag (612, 694), format (613, 695), block size (614-621, 696-703), 64 codes
    # (622-685, 704-767) and two scales (686-693, 768-775).
    seed("seed-lowbit-unchanged", 32, 0, 0, [])
    seed("seed-lowbit-resealed-first-format", 33, 1, 0, [(613, 0x01)])
    seed("seed-lowbit-resealed-second-format", 33, 2, 0, [(695, 0x07)])
    seed("seed-lowbit-resealed-block-size", 33, 0, 0, [(614, 0x60)])
    seed("seed-lowbit-resealed-code", 33, 1, 0, [(630, 0x01)])
    seed("seed-lowbit-resealed-scale", 33, 2, 0, [(689, 0x80)])
    seed("seed-lowbit-truncated-scales", 35, 0, 772, [])
    # Flag bit 7 with bit 5: the same model with Float16 moments (FP16 codes and power-of-two
    # scales; 912-byte blobs): per moment the present flag (612, 758), format (613, 759), block
    # size (614-621, 760-767), 64 two-byte codes (622-749, 768-895) and two scales (750-757, 896-903).
    seed("seed-fp16-unchanged", 160, 0, 0, [])
    seed("seed-fp16-resealed-first-format", 161, 1, 0, [(613, 0x07)])
    seed("seed-fp16-resealed-code", 161, 2, 0, [(631, 0x7c)])
    seed("seed-fp16-resealed-scale", 161, 0, 0, [(899, 0x80)])
    seed("seed-fp16-truncated-scales", 163, 1, 900, [])
    seed("seed-resealed-late", 1, 2, 0, [(420, 0x08)])
    seed("seed-truncated", 3, 1, 200, [])
    seed("seed-appended", 5, 0, 0, [], b"\x00" * 12)
    seed("seed-bit-flip-unsealed", 0, 2, 0, [(150, 0x80)])
    seed("seed-dropped", 8, 1, 0, [])
    seed("seed-duplicated", 16, 0, 0, [])


def fp8_recipe_state_seeds() -> None:
    # recipe (0 DelayedScaling H=4 margin 1 HYBRID max, 1 DelayedScaling H=1 E4M3 most_recent,
    # 2 CurrentScaling HYBRID), flags, step count, steps, blob; tensors w, x (Forward), g (Gradient).
    # Scales are powers of two so that scale_inv = 1 / scale is exact here as in FP32.
    def seed(name, recipe, flags, steps, data):
        write("fp8_recipe_state", name, bytes([recipe, flags, len(steps)]) + bytes(steps) + data)

    def entry(name, role, history, scale=1.0, scale_inv=None):
        inverse = 1.0 / scale if scale_inv is None else scale_inv
        return (struct.pack("<I", len(name)) + name.encode() + bytes([role]) +
                b"".join(struct.pack("<f", a) for a in history) + struct.pack("<ff", scale, inverse))

    def delayed(history_len, algo, margin, fmt, entries):
        return blob("fp8.DelayedScaling", 1, struct.pack("<QBqBQ", history_len, algo, margin, fmt, len(entries)) +
                    b"".join(entries))

    def current(fmt, entries):
        return blob("fp8.CurrentScaling", 1, struct.pack("<BQ", fmt, len(entries)) + b"".join(entries))

    steps = [5, 13, 0, 1, 2, 3, 4, 21, 29, 37]
    h4 = [entry("w", 0, [1.0, 0.0, 2.0, 0.5], 128.0), entry("x", 0, [0.0, 4.0, 8.0, 16.0], 16.0),
          entry("g", 1, [1e-3, 0.0, 0.0, 0.0], 2.0 ** 24)]
    seed("seed-delayed", 0, 0, steps, delayed(4, 0, 1, 1, h4))
    seed("seed-delayed-nan-inf-history", 0, 0, steps,
         delayed(4, 0, 1, 1, [entry("w", 0, [float("nan"), float("inf"), 0.0, 1.0], 0.5)] + h4[1:]))
    seed("seed-delayed-reordered", 0, 0, steps, delayed(4, 0, 1, 1, [h4[2], h4[0], h4[1]]))
    seed("seed-delayed-wrong-history", 0, 0, steps, delayed(3, 0, 1, 1, [entry(n, r, [0.0] * 3) for n, r in
                                                                         (("w", 0), ("x", 0), ("g", 1))]))
    seed("seed-delayed-wrong-role", 0, 1, steps, delayed(4, 0, 1, 1, [h4[0], h4[1], entry("g", 0, [0.0] * 4)]))
    seed("seed-delayed-bad-inverse", 0, 1, steps, delayed(4, 0, 1, 1, [entry("w", 0, [0.0] * 4, 4.0, 0.5)] + h4[1:]))
    seed("seed-delayed-negative-amax", 0, 1, steps, delayed(4, 0, 1, 1, [entry("w", 0, [-1.0, 0, 0, 0])] + h4[1:]))
    seed("seed-delayed-unknown-name", 0, 1, steps, delayed(4, 0, 1, 1, [entry("v", 0, [0.0] * 4)] + h4[1:]))
    seed("seed-delayed-huge-count", 0, 1, steps, blob("fp8.DelayedScaling", 1,
                                                       struct.pack("<QBqBQ", 4, 0, 1, 1, (1 << 64) - 1)))
    h1 = [entry(n, r, [a], 2.0 ** k) for n, r, a, k in (("w", 0, 3.0, 7), ("x", 0, 0.0, 0), ("g", 1, float("inf"), -3))]
    seed("seed-delayed-most-recent", 1, 0, steps, delayed(1, 1, 0, 0, h1))
    seed("seed-delayed-truncated", 1, 0, steps, delayed(1, 1, 0, 0, h1)[:-13])
    cur = [entry("w", 0, [2.5], 128.0), entry("x", 0, [0.0]), entry("g", 1, [1.0], 32768.0)]
    seed("seed-current", 2, 0, steps, current(1, cur))
    seed("seed-current-wrong-format", 2, 0, steps, current(0, cur))
    seed("seed-current-as-delayed", 0, 0, steps, current(1, cur))


if __name__ == "__main__":
    state_blob_seeds()
    scaler_state_seeds()
    idx_seeds()
    fsdp_checkpoint_seeds()
    fsdp_sharded_checkpoint_seeds()
    fp8_recipe_state_seeds()
