#!/usr/bin/env python3
"""Exhaustive pre-tokenizer check: every Unicode scalar value, in several contexts, through our tokenizer
(build/libnf.so) and the `tokenizers` library; prints the code points whose ids differ.

Why: the library runs the GLM split regex with Oniguruma, we run it with PCRE2; their Unicode tables and
class definitions (\\s, \\p{L}, \\p{N}, case folding) could differ on rare characters that no corpus
contains. This found U+180E (PCRE2's \\s includes it, Oniguruma's does not), now handled in tokenizer.c.
Takes ~1.5 minutes. Not part of `make test` (too slow); run after changing the regex or PCRE2.

usage: NF_BUILD=build scripts/check_pretokenizer_unicode.py [tokenizer.json]
"""
import ctypes, os, sys, time

from tokenizers import Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILD = os.environ.get("NF_BUILD", os.path.join(ROOT, "build"))


class Tokens(ctypes.Structure):
    _fields_ = [("ids", ctypes.POINTER(ctypes.c_int32)), ("n", ctypes.c_size_t), ("cap", ctypes.c_size_t)]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "tiny", "tokenizer.json")
    L = ctypes.CDLL(os.path.join(BUILD, "libnf.so"))
    L.nf_tokenizer_load.restype = ctypes.c_void_p
    L.nf_tokenizer_load.argtypes = [ctypes.c_char_p]
    L.nf_tokenize_text.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Tokens)]
    L.nf_tokens_free.argtypes = [ctypes.POINTER(Tokens)]
    t = L.nf_tokenizer_load(path.encode())
    if not t:
        sys.exit("cannot load " + path)

    def ours(s):
        b = s.encode()
        out = Tokens()
        L.nf_tokenize_text(t, b, len(b), ctypes.byref(out))
        ids = out.ids[: out.n]
        L.nf_tokens_free(ctypes.byref(out))
        return ids

    hf = Tokenizer.from_file(path)
    added = {a.content for a in hf.get_added_tokens_decoder().values()}
    ctx = lambda c: f"a{c}b {c}{c} 1{c}2 '{c}s '{c}\n{c}\n  {c}  x{c} {c}{c}{c}  \t{c}\r\n"
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    CH = 400
    t0 = time.time()
    texts = ["".join(ctx(chr(c)) for c in cps[i:i + CH]) for i in range(0, len(cps), CH)]
    want = hf.encode_batch(texts, add_special_tokens=False)
    bad = []
    for k, (s, w) in enumerate(zip(texts, want)):
        if any(a in s for a in added):
            continue
        if ours(s) != w.ids:
            for c in cps[k * CH:(k + 1) * CH]:
                s1 = ctx(chr(c))
                if ours(s1) != hf.encode(s1, add_special_tokens=False).ids:
                    bad.append(c)
    print(f"{len(cps)} code points checked in {time.time() - t0:.0f}s; differing: {[hex(c) for c in bad]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
