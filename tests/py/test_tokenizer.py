"""Tokenizer cross-check: our C tokenizer (build/libnf.so through ctypes) against the ids the Hugging Face
`tokenizers` library produced for the embedded model's tokenizer (models/tiny/tokenizer.json) on a >= 1 MB
mixed corpus (tests/data/tokenizer/corpus.bin.gz, written by scripts/make_tokenizer_fixtures.py).

Also: decode(encode(x)) == x on the corpus and on arbitrary bytes (invalid UTF-8 included), the GGUF path
(nf_tokenizer_write_gguf_meta -> GGUF file -> nf_tokenizer_load gives the same ids; keys readable by the
`gguf` package), special-token text staying text, and the `nf tokenize` / `nf detokenize` commands.
"""

import ctypes
import gzip
import os
import random
import struct
import subprocess
import time

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("NF_BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
TOKJSON = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer", "corpus.bin.gz")


class Tokens(ctypes.Structure):
    _fields_ = [("ids", ctypes.POINTER(ctypes.c_int32)), ("n", ctypes.c_size_t), ("cap", ctypes.c_size_t)]


@pytest.fixture(scope="module")
def lib():
    L = ctypes.CDLL(os.path.join(BUILD, "libnf.so"))
    L.nf_tokenizer_load.restype = ctypes.c_void_p
    L.nf_tokenizer_load.argtypes = [ctypes.c_char_p]
    L.nf_tokenizer_free.argtypes = [ctypes.c_void_p]
    L.nf_tokenize_text.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Tokens)]
    L.nf_tokens_free.argtypes = [ctypes.POINTER(Tokens)]
    L.nf_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    L.nf_error.restype = ctypes.c_char_p
    L.nf_token_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    L.nf_tokenizer_write_gguf_meta.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    L.gguf_writer_create.restype = ctypes.c_void_p
    L.gguf_writer_create.argtypes = [ctypes.c_char_p]
    L.gguf_writer_begin_data.argtypes = [ctypes.c_void_p]
    L.gguf_writer_finish.argtypes = [ctypes.c_void_p]
    L.free.argtypes = [ctypes.c_void_p]
    return L


def load(L, path):
    t = L.nf_tokenizer_load(path.encode())
    assert t, L.nf_error().decode()
    return t


def encode(L, t, b):
    out = Tokens()
    assert L.nf_tokenize_text(t, b, len(b), ctypes.byref(out)) == 0, L.nf_error().decode()
    ids = out.ids[: out.n]
    L.nf_tokens_free(ctypes.byref(out))
    return ids


def decode(L, t, ids):
    arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    assert L.nf_detokenize(t, arr, len(ids), ctypes.byref(p), ctypes.byref(n)) == 0, L.nf_error().decode()
    s = ctypes.string_at(p, n.value)
    L.free(p)
    return s


def read_corpus():
    data = gzip.open(CORPUS).read()
    docs, o = [], 0
    while o < len(data):
        (n,) = struct.unpack_from("<I", data, o)
        text = data[o + 4 : o + 4 + n]
        o += 4 + n
        (k,) = struct.unpack_from("<I", data, o)
        ids = list(struct.unpack_from(f"<{k}H", data, o + 4))
        o += 4 + 2 * k
        docs.append((text, ids))
    return docs


@pytest.fixture(scope="module")
def corpus():
    return read_corpus()


def test_corpus_is_big_and_mixed(corpus):
    total = sum(len(t) for t, _ in corpus)
    assert total >= 1_000_000
    joined = b"".join(t for t, _ in corpus).decode("utf-8")
    for probe in ("你好", "👩\u200d👩", "\u3000", "    ", "def ", "١٢٣", "Привет"):
        assert probe in joined


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def test_ids_equal_tokenizers_library(lib, corpus):
    t = load(lib, TOKJSON)
    bad = []
    t0 = time.perf_counter()
    n_bytes = n_ids = 0
    for i, (text, want) in enumerate(corpus):
        got = encode(lib, t, text)
        n_bytes += len(text)
        n_ids += len(got)
        if got != want:
            j = first_diff(got, want)
            bad.append(f"doc {i}: first difference at id {j}: ours {got[j:j+6]} library {want[j:j+6]} "
                       f"(text near {decode(lib, t, want[max(0, j-3):j+3])!r})")
    dt = time.perf_counter() - t0
    print(f"\ntokenized {n_bytes} bytes -> {n_ids} ids in {dt:.2f}s ({n_bytes / dt / 1e6:.1f} MB/s incl. ctypes)")
    lib.nf_tokenizer_free(t)
    assert not bad, "\n".join(bad[:10])


def test_decode_encode_roundtrip(lib, corpus):
    t = load(lib, TOKJSON)
    for text, _ in corpus:
        assert decode(lib, t, encode(lib, t, text)) == text
    rng = random.Random(7)
    for _ in range(300):  # arbitrary bytes, invalid UTF-8 included
        b = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        assert decode(lib, t, encode(lib, t, b)) == b
    lib.nf_tokenizer_free(t)


def test_special_token_text_is_text(lib):
    t = load(lib, TOKJSON)
    user = lib.nf_token_id(t, b"<|user|>")
    think = lib.nf_token_id(t, b"<think>")
    assert user >= 0 and think >= 0
    ids = encode(lib, t, b"<|user|> hi <think>")
    assert user not in ids and think not in ids
    assert decode(lib, t, ids) == b"<|user|> hi <think>"
    assert decode(lib, t, [user, think]) == b"<|user|><think>"
    lib.nf_tokenizer_free(t)


def test_gguf_roundtrip(lib, corpus, tmp_path):
    path = str(tmp_path / "tok.gguf")
    w = lib.gguf_writer_create(path.encode())
    assert w
    assert lib.nf_tokenizer_write_gguf_meta(os.path.dirname(TOKJSON).encode(), w) == 0, lib.nf_error().decode()
    assert lib.gguf_writer_begin_data(w) == 0, lib.nf_error().decode()
    assert lib.gguf_writer_finish(w) == 0, lib.nf_error().decode()
    t = load(lib, path)
    for text, want in corpus[::7]:
        assert encode(lib, t, text) == want
    lib.nf_tokenizer_free(t)

    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(path)
    f = r.fields

    def s(key):
        return bytes(f[key].parts[f[key].data[0]]).decode()

    assert s("tokenizer.ggml.model") == "gpt2"
    assert s("tokenizer.ggml.pre") == "glm4"
    n_tok = len(f["tokenizer.ggml.tokens"].data)
    import json
    j = json.load(open(TOKJSON))
    vocab_rows = None
    cfg_path = os.path.join(os.path.dirname(TOKJSON), "config.json")
    if os.path.exists(cfg_path):  # the converter pads the token list to the embedding rows
        cfg = json.load(open(cfg_path))
        vocab_rows = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
    n_json = max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"])) + 1
    assert n_tok == max(n_json, vocab_rows or 0)
    assert len(f["tokenizer.ggml.merges"].data) == len(j["model"]["merges"])
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    for a in j["added_tokens"]:
        assert types[a["id"]] == (3 if a["special"] else 4)
    eos = int(f["tokenizer.ggml.eos_token_id"].parts[-1][0])
    assert bytes(f["tokenizer.ggml.tokens"].parts[f["tokenizer.ggml.tokens"].data[eos]]).decode() == "<|endoftext|>"


def test_nf_tokenize_detokenize_commands(corpus):
    nf = os.path.join(BUILD, "nf")
    text = corpus[4][0].decode()
    out = subprocess.run([nf, "tokenize", "-m", TOKJSON, "--ids-only", "--text", text], capture_output=True,
                         check=True).stdout.decode().split()
    ids = [int(x) for x in out]
    assert ids == corpus[4][1]
    back = subprocess.run([nf, "detokenize", "-m", TOKJSON] + out, capture_output=True, check=True).stdout
    assert back == corpus[4][0]
    bad = subprocess.run([nf, "detokenize", "-m", TOKJSON, "99999999"], capture_output=True)
    assert bad.returncode != 0 and b"out of range" in bad.stderr


def test_regex_engine_edge_cases(lib):
    """Strings where PCRE2 and Oniguruma (the library's engine) could disagree, e.g. U+180E."""
    import json
    t = load(lib, TOKJSON)
    cases = json.load(open(os.path.join(ROOT, "tests", "data", "tokenizer", "edge_cases.json"), encoding="utf-8"))
    for c in cases:
        assert encode(lib, t, c["text"].encode()) == c["ids"], repr(c["text"])
    lib.nf_tokenizer_free(t)
