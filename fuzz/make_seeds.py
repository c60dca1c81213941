#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into fuzz/corpus/<target>/.

The committed corpus also holds inputs the fuzzer found (named by their SHA-1);
rerun this only to change the seeds. Formats follow src/mlframework/core/StateBlob.hpp.
"""
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


if __name__ == "__main__":
    state_blob_seeds()
