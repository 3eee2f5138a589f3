#!/usr/bin/env python3
"""Generates the safetensors test corpus (committed; rerun after changing this script):

  safetensors/*.safetensors     malformed files, one validation rule each; every one must make
                                read_safetensors throw vitddp::Error (never crash)
  safetensors/expected.json     {file: [substrings the error message must contain]}
  safetensors_ok/*.safetensors  valid files (also good fuzzer seeds)

Usage: python3 tests/data/corpus/make_corpus.py   (standard library only)
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "safetensors")
OK = os.path.join(HERE, "safetensors_ok")


def blob(header, data=b"", length=None, pad=True):
    """header: dict (serialised compactly) or str/bytes (used verbatim)."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * ((8 - len(header) % 8) % 8)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


# A valid two-tensor file most bad cases start from: a = F32[2, 3] (24 bytes), b = I64[2] (16 bytes).
A = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
B = {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}
DATA = f32(1, 2, 3, 4, 5, 6) + struct.pack("<2q", 7, -8)
GOOD = blob({"a": A, "b": B}, DATA)


def entry(**changes):
    e = dict(A)
    e.update(changes)
    return e


def without(key):
    e = dict(A)
    del e[key]
    return e


def flip(data, byte, bit):
    b = bytearray(data)
    b[byte] ^= 1 << bit
    return bytes(b)


bad = {}


def case(name, content, *expect):
    bad[name] = (content, list(expect))


# --- file and header length ---
case("empty_file", b"", "too short")
case("short_file", b"\x05\x00\x00\x00\x00", "is 5 bytes, too short")
case("truncated_in_header", GOOD[:20], "header length", "bytes after the length field")
case("truncated_in_data", GOOD[:-10], "tensor 'b'", "go past the end of the data (30 bytes)")
case("header_len_huge", struct.pack("<Q", 1 << 63) + GOOD[8:], "header length 9223372036854775808",
     "exceeds the limit")
case("header_len_over_100mb", struct.pack("<Q", 100_000_001) + GOOD[8:], "exceeds the limit of 100000000")
case("header_len_past_eof", struct.pack("<Q", len(GOOD)) + GOOD[8:], "exceeds the", "after the length field")
case("header_len_short", blob({"a": A, "b": B}, DATA, length=30), "not valid JSON")
case("header_len_zero", struct.pack("<Q", 0) + DATA, "header is empty")
# --- JSON syntax ---
case("bitflip_header_quote", flip(GOOD, 9, 0), "not valid JSON")       # '"' -> '#'
case("bitflip_header_brace", flip(GOOD, 8, 1), "not valid JSON")       # '{' -> 'y'
case("malformed_json", blob('{"a": {"dtype": "F32", "shape": [2, 3]', DATA), "not valid JSON")
case("header_nul_padding", blob(json.dumps({"a": A, "b": B}).encode() + b"\0\0\0", DATA, pad=False),
     "not valid JSON")
case("invalid_utf8_name", blob(b'{"\xff\xfe": ' + json.dumps(A).encode() + b"}", DATA[:24]), "not valid JSON")
case("header_not_object", blob("[1, 2, 3]", DATA), "header must be a JSON object, got array")
case("header_string", blob('"hello"', DATA), "header must be a JSON object, got string")
case("nested_too_deep", blob('{"a": {"dtype": "F32", "shape": [[[[[1]]]]], "data_offsets": [0, 4]}}', f32(1)),
     "nested deeper")
# --- names and keys ---
case("duplicate_names", blob('{"a": %s, "a": %s}' % (json.dumps(A), json.dumps(B)), DATA),
     "duplicate tensor name 'a'")
case("duplicate_entry_key", blob('{"a": {"dtype": "F32", "dtype": "F64", "shape": [2, 3], "data_offsets": [0, 24]}}',
                                 DATA[:24]), "duplicate key 'dtype'")
case("unknown_entry_key", blob({"a": entry(foo=1), "b": B}, DATA), "tensor 'a' has unknown key 'foo'")
case("unknown_reserved_key", blob({"__format__": {}, "a": A, "b": B}, DATA), "unknown reserved key '__format__'")
case("empty_name", blob({"": A, "b": B}, DATA), "empty name")
case("metadata_not_object", blob({"__metadata__": [1], "a": A, "b": B}, DATA),
     "__metadata__ must be an object", "got array")
case("metadata_value_not_string", blob({"__metadata__": {"epoch": 3}, "a": A, "b": B}, DATA),
     "__metadata__ value for 'epoch' must be a string, got number")
# --- entries ---
case("entry_not_object", blob({"a": 5}, b""), "tensor 'a' must be a JSON object, got number")
case("missing_dtype", blob({"a": without("dtype"), "b": B}, DATA), "tensor 'a' has no dtype")
case("missing_shape", blob({"a": without("shape"), "b": B}, DATA), "tensor 'a' has no shape")
case("missing_data_offsets", blob({"a": without("data_offsets"), "b": B}, DATA), "tensor 'a' has no data_offsets")
case("dtype_not_string", blob({"a": entry(dtype=1), "b": B}, DATA), "dtype must be a string, got number")
case("dtype_unknown", blob({"a": entry(dtype="F8_E4M3"), "b": B}, DATA), "unsupported dtype 'F8_E4M3'")
case("dtype_lowercase", blob({"a": entry(dtype="f32"), "b": B}, DATA), "unsupported dtype 'f32'")
case("dtype_wrong_size", blob({"a": entry(dtype="F64"), "b": B}, DATA),
     "tensor 'a' data_offsets [0, 24] hold 24 bytes but F64[2, 3] needs 48")
case("bytes_mismatch", blob({"conv_proj.weight": entry(shape=[3, 4], data_offsets=[0, 100])}, bytes(100)),
     "tensor 'conv_proj.weight' data_offsets [0, 100] hold 100 bytes but F32[3, 4] needs 48")
case("shape_not_array", blob({"a": entry(shape=6), "b": B}, DATA), "shape must be an array, got number")
case("shape_negative", blob({"a": entry(shape=[-2, 3]), "b": B}, DATA), "negative dimension -2")
case("shape_float", blob({"a": entry(shape=[2.5, 3]), "b": B}, DATA), "shape must hold non-negative integers")
case("shape_string", blob({"a": entry(shape=["2", 3]), "b": B}, DATA), "shape must hold non-negative integers")
case("shape_overflow", blob({"a": entry(shape=[4294967296, 4294967296, 4]), "b": B}, DATA), "too many elements")
case("shape_overflow_bytes", blob({"a": entry(shape=[1 << 62]), "b": B}, DATA), "too many elements")
# Empty, but its strides would overflow (the product of the other dimensions is 2^64).
case("shape_empty_overflowing_strides", blob({"a": entry(shape=[0, 4294967296, 4294967296], data_offsets=[0, 0]),
                                              "b": B}, DATA), "too many elements")
case("shape_dim_u64_max", blob({"a": entry(shape=[18446744073709551615]), "b": B}, DATA),
     "dimension 18446744073709551615", "too large")
case("shape_dim_beyond_u64", blob('{"a": {"dtype": "F32", "shape": [99999999999999999999999], "data_offsets": [0, 24]}}',
                                  DATA[:24]), "shape must hold non-negative integers")
case("shape_huge_no_overflow", blob({"a": entry(shape=[1000000, 1000000]), "b": B}, DATA),
     "hold 24 bytes but F32[1000000, 1000000] needs 4000000000000")
case("rank_too_big", blob({"a": entry(shape=[1] * 65), "b": B}, DATA), "rank 65")
# --- offsets ---
case("offsets_not_array", blob({"a": entry(data_offsets=24), "b": B}, DATA), "data_offsets must be two")
case("offsets_three", blob({"a": entry(data_offsets=[0, 12, 24]), "b": B}, DATA), "data_offsets must be two")
case("offsets_negative", blob({"a": entry(data_offsets=[-1, 23]), "b": B}, DATA), "data_offsets must be two")
case("offsets_strings", blob({"a": entry(data_offsets=["0", "24"]), "b": B}, DATA), "data_offsets must be two")
case("offsets_float", blob({"a": entry(data_offsets=[0.0, 24.0]), "b": B}, DATA), "data_offsets must be two")
case("offsets_reversed", blob({"a": entry(data_offsets=[24, 0]), "b": B}, DATA), "[24, 0] end before they begin")
case("offsets_past_end", blob({"a": A, "b": dict(B, data_offsets=[24, 1000])}, DATA), "go past the end")
case("offsets_u64_max", blob({"a": entry(data_offsets=[18446744073709551592, 18446744073709551615]), "b": B}, DATA),
     "go past the end")
case("overlap", blob({"a": A, "b": dict(B, data_offsets=[16, 32])}, DATA[:32]),
     "tensor 'b' data_offsets [16, 32] overlap tensor 'a' at [0, 24]")
case("overlap_same_range", blob({"a": entry(shape=[2], data_offsets=[0, 8]), "b": dict(B, shape=[1], data_offsets=[0, 8])},
                                bytes(8)), "overlap")
case("gap", blob({"a": A, "b": dict(B, data_offsets=[32, 48])}, DATA + bytes(8)),
     "data bytes [24, 32) belong to no tensor")
case("gap_at_start", blob({"a": entry(data_offsets=[8, 32]), "b": dict(B, data_offsets=[32, 48])}, bytes(8) + DATA),
     "data bytes [0, 8) belong to no tensor")
case("trailing_bytes", GOOD + bytes(8), "8 trailing bytes")
case("no_tensors_but_data", blob({}, bytes(16)), "16 trailing bytes")


def bits16(*values):
    return struct.pack("<%dH" % len(values), *values)


def write_ok():
    """all_dtypes: every dtype, metadata, a scalar and an empty tensor; header order differs from
    data order; the header is padded with spaces, as the reference writer does."""
    parts = [  # (name, dtype, shape, bytes), in data order
        ("i", "I64", [3], struct.pack("<3q", -1, 1 << 40, 7)),
        ("f32", "F32", [2, 2], f32(1.5, -2.25, 3.0, 0.0625)),
        ("bf16", "BF16", [3], bits16(0x3F80, 0xC000, 0x3F00)),   # 1, -2, 0.5
        ("f16", "F16", [3], bits16(0x3C00, 0xC000, 0x3800)),     # 1, -2, 0.5
        ("empty", "F32", [0, 3], b""),
        ("scalar", "F64", [], struct.pack("<d", 42.0)),
        ("f64", "F64", [1, 3], struct.pack("<3d", 1.0, 2.0, -3.5)),
    ]
    header, data = {}, b""
    for name, dtype, shape, raw in parts:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    ordered = {"__metadata__": {"format": "pt", "note": "corpus"}}
    for name in ["f32", "f64", "bf16", "f16", "i", "scalar", "empty"]:
        ordered[name] = header[name]
    text = json.dumps(ordered, separators=(",", ":")) + "   \n  "
    ok = {
        "all_dtypes": blob(text, data),
        "no_tensors": blob({}),
        "metadata_only": blob({"__metadata__": {"k": "v"}}),
        "two_tensors": GOOD,
    }
    return ok


def main():
    os.makedirs(BAD, exist_ok=True)
    os.makedirs(OK, exist_ok=True)
    for d in (BAD, OK):
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
    expected = {}
    for name, (content, expect) in sorted(bad.items()):
        with open(os.path.join(BAD, name + ".safetensors"), "wb") as f:
            f.write(content)
        expected[name + ".safetensors"] = expect
    with open(os.path.join(BAD, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    for name, content in write_ok().items():
        with open(os.path.join(OK, name + ".safetensors"), "wb") as f:
            f.write(content)
    print("wrote %d bad and %d good files" % (len(bad), len(write_ok())))


if __name__ == "__main__":
    main()
