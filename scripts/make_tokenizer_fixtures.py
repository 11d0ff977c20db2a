#!/usr/bin/env python3
"""Build the tokenizer cross-check data: a >= 1 MB mixed-text corpus and the `tokenizers` library's ids.

Why: src/text/tokenizer.c must give exactly the ids Hugging Face `tokenizers` gives for the embedded model's
tokenizer (models/tiny/tokenizer.json, GLM pre-tokenizer). The corpus mixes what breaks tokenizers: source
code (Python stdlib), English prose (/usr/share/doc, licences), many scripts and languages, emoji with ZWJ
sequences and modifiers, combining marks, long and odd whitespace runs (tabs, CR/LF mixes, NBSP, U+3000,
U+2028), digit runs in several numeral systems, case variants of English contractions, control characters,
and seeded random code points from all planes. Documents containing the text of an added token (<think>,
<|user|>, ...) are edited, because the library would turn that text into the added token and our
nf_tokenize_text deliberately does not.

Output: tests/data/tokenizer/corpus.bin.gz, records of
  u32 text_len, text bytes (UTF-8), u32 n_ids, n_ids x u16 ids      (little-endian; vocab < 65536)
read by tests/py/test_tokenizer.py; and tests/data/tokenizer/edge_cases.json, short strings on the
boundaries between the regex engines (found by scripts/check_pretokenizer_unicode.py) with their ids.

usage: scripts/make_tokenizer_fixtures.py [--tokenizer models/tiny/tokenizer.json] [--out ...] [--mb 1.1]
"""
import argparse, glob, gzip, os, random, struct, sys

from tokenizers import Tokenizer

HAND = [
    "Hello, world! It's a test: don't, won't, I'M, HE'LL, they'Re, we'VE, she'D, 'S, ſ's, it’s",
    "你好，世界！这是一个测试。日本語のテキスト、カタカナ、ひらがな。한국어 텍스트입니다.",
    "Привет, мир! Ελληνικά: καλημέρα κόσμε. עברית: שלום עולם. العربية: مرحبا بالعالم ١٢٣٤٥٦٧٨٩٠",
    "हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก ທົດສອບ ქართული Հայերեն ᚠᚢᚦᚨᚱᚲ 𐌰𐌱𐌲 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "Emoji: 😀😃😄 👩‍👩‍👧‍👦 👍🏽👍🏿 🇫🇷🇯🇵🏳️‍🌈 ❤️‍🔥 🧑🏻‍💻 1️⃣ #️⃣ 🫠 ©️ ®",
    "Combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352\u0353 \u1100\u1161\u11a8 ﬁ ﬀ Å Å",
    "Whitespace:    four  two\tone\t\ttabs\n\n\nthree newlines\r\nCRLF\r\r\n\u00a0nbsp\u3000ideo\u2028ls\u2029ps \u200b zw",
    " " * 37 + "x" + "\t" * 19 + "y" + "\n" * 11 + " \n \n\t\n" + " " * 200,
    "Digits: 0 12 345 6789 1234567890123 3.14159 1,234,567.89 -42 1e-10 0x1F 0b1010 ٣٤٥ ۶۷۸ ０１２３ १२३ ๑๒๓ ²³ ½ Ⅻ",
    "Mixed: abc123def 123abc abc-123 v1.2.3 2024-01-01T12:34:56Z $100 €5 ¥3000 50% #tag @user a_b__c",
    "Code: int main(void) { return printf(\"%d\\n\", x[i++] >> 2) != 0 ? -1 : 0; } // comment\n\tif (a&&b||!c) {}",
    "Ctrl: \x00\x01\x02\x07\x08\x0b\x0c\x1b[31mred\x1b[0m\x7f\x1f end",
    "Punct runs: !!! ??? ... --- ___ *** ~~~ ((( ))) [[[ ]]] {{{ }}} <<< >>> ''' \"\"\" ``` ;;; ::: ,,,",
    "BOM\ufeffinside; private use \ue000\uf8ff; specials \ufff9\ufffc\ufffd; noncharacters \ufdd0 \U0010fffd",
    "Apostrophes: l'homme aujourd'hui rock'n'roll O'Neil y'all ma'am 'twas ’tis ʼokina",
    "URL https://example.com/path?q=1&r=%20x#frag email a.b+c@d.example.org path C:\\Users\\x\\file.txt",
]


EDGE = [
    "  \u180e  x", "\u180e\u180e  \u180e", "a\u180eb", "x \u180e\n", "it'\u017f", "'\u212a", "'S'T'RE'VE'M'LL'D",
    "\u00a0\u00a0x", "\u2028\u2029\x85 x", "\x1c\x1d\x1e\x1f  y", "\u200b \u200b", "\u3000\u3000\u3000z",
    "1234567", "\uff11\uff12\uff13\uff14", "\u0661\u0662\u0663\u0664", "\u2460\u2461\u2462\u2463",
    "\U0001d7ce\U0001d7cf\U0001d7d0\U0001d7d1", "a\u0301\u0301\u0301b", "\U000e0041\U000e0042 tag",
    " \n \n", "\r\r\r\n\n", "   \t\t  \n  end", "!!!\n\n", " ?!\r\n",
]


def random_text(rng, n_chars):
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
              (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f), (0x2190, 0x23ff), (0x3000, 0x30ff),
              (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xff00, 0xffef), (0x1f300, 0x1faff), (0x10000, 0x1007f),
              (0x1d400, 0x1d7ff), (0x20000, 0x2a6df), (0xe0000, 0xe007f), (0x9, 0xd)]
    out = []
    while len(out) < n_chars:
        lo, hi = rng.choice(blocks)
        run = rng.randint(1, 12)
        for _ in range(run):
            c = rng.randint(lo, hi)
            if 0xd800 <= c <= 0xdfff:
                continue
            out.append(chr(c))
        if rng.random() < 0.3:
            out.append(rng.choice([" ", "  ", "\n", "\t", " \n", "'s", "'LL", "123", "4567"]))
    return "".join(out)


def collect(target_bytes, rng):
    docs = list(HAND)
    stdlib = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    files = files[::5][:60]
    files += sorted(glob.glob("/usr/share/common-licenses/*"))[:12]
    files += sorted(f for f in glob.glob("/usr/share/doc/*/*") if not f.endswith(".gz") and os.path.isfile(f)
                    and os.path.getsize(f) < 200_000)[:80]
    for f in files:
        try:
            t = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(t[:16_000])
    for i in range(40):
        docs.append(random_text(rng, rng.randint(200, 3000)))
    total = sum(len(d.encode()) for d in docs)
    i = 0
    while total < target_bytes:  # top up with more random text if the machine's files are few
        d = random_text(rng, 4000)
        docs.append(d)
        total += len(d.encode())
        i += 1
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="models/tiny/tokenizer.json")
    ap.add_argument("--out", default="tests/data/tokenizer/corpus.bin.gz")
    ap.add_argument("--mb", type=float, default=1.1)
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    if tok.get_vocab_size() > 65536:
        sys.exit("ids are stored as u16: vocabulary too large")
    added = [t.content for t in tok.get_added_tokens_decoder().values()]
    rng = random.Random(1234)
    docs = collect(int(a.mb * 1e6), rng)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    n_bytes = n_ids = 0
    with gzip.GzipFile(a.out, "wb", mtime=0) as f:
        for d in docs:
            for s in added:
                d = d.replace(s, s[:1] + " " + s[1:])
            b = d.encode("utf-8")
            ids = tok.encode(d, add_special_tokens=False).ids
            f.write(struct.pack("<I", len(b)) + b + struct.pack("<I", len(ids)) + struct.pack(f"<{len(ids)}H", *ids))
            n_bytes += len(b)
            n_ids += len(ids)
    print(f"{a.out}: {len(docs)} documents, {n_bytes} bytes, {n_ids} ids, {os.path.getsize(a.out)} bytes gzip")
    edge_path = os.path.join(os.path.dirname(a.out), "edge_cases.json")
    import json
    with open(edge_path, "w", encoding="utf-8") as f:
        json.dump([{"text": e, "ids": tok.encode(e, add_special_tokens=False).ids} for e in EDGE], f, ensure_ascii=True)
    print(f"{edge_path}: {len(EDGE)} strings")


if __name__ == "__main__":
    main()
