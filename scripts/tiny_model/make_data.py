#!/usr/bin/env python3
"""Build the training corpus of the embedded tiny model (models/tiny).

Why: the project ships a ~15M-parameter glm5_next model trained from scratch, and its training text must be
freely licensed and reproducible from what a Debian machine with Python already holds. Sources (each file or
info node is one document; the held-out split is by document, by a hash of its name, so held-out text is
never seen in training):

  pystdlib  CPython 3.11 standard library *.py sources (PSF License 2.0; LICENSE.txt beside them);
            the encodings/ tables and site-packages/ are left out.
  info      GNU/Texinfo manuals in /usr/share/info (GFDL for the GNU manuals; gnupg GPL-3+, nettle
            LGPL/GPL, libffi MIT, ...: see /usr/share/doc/<package>/copyright), split into info nodes.
  doc       plain-text documentation of the installed Debian main packages in /usr/share/doc (README*,
            NEWS*, *.txt, *.md, *.rst, FAQ*, changelog*; each under its package's copyright file, DFSG-free),
            at most 40 kB per file (8 kB for changelogs/NEWS).

The doc and info sources depend on the Debian packages installed. --exclude-packages skips the files of the named
packages (dpkg -L), so the corpus of an earlier machine state can be rebuilt: the shipped model's corpus (MODEL_CARD.md
token counts) was made before scripts/install-deps.sh added libedit-dev and libmicrohttpd-dev; on a machine where
install-deps has run since, pass --exclude-packages libedit-dev,libbsd-dev,libmd-dev,libmicrohttpd12,libmicrohttpd-dev
(libedit-dev pulled in libbsd-dev and libmd-dev; their changelogs equal libbsd0's / libmd0's and, sorting first,
would replace them under other names). tokenize_data.py's counts then equal MODEL_CARD.md's.

Output (default .tinydata/, git-ignored): docs_train.jsonl, docs_heldout.jsonl ({"src","name","text"} per
line) and sources.json (counts and bytes per source and split).
Usage: python3 scripts/tiny_model/make_data.py [--out .tinydata] [--heldout-pct 2] [--exclude-packages P1,P2]
"""
import argparse, glob, gzip, hashlib, json, os, re, subprocess, sys, sysconfig

EXCLUDED = set()   # absolute paths of files owned by --exclude-packages

def read_text(path, allow_nul=False):
    op = gzip.open if path.endswith(".gz") else open
    try:
        with op(path, "rb") as f:
            b = f.read()
        t = b.decode("utf-8")
    except (UnicodeDecodeError, OSError, EOFError):
        return None
    if allow_nul:  # Texinfo index markers: NUL BS [index NUL BS ] and friends
        t = re.sub("\x00\x08\\[[^\x00]*\x00\x08\\]", "", t).replace("\x00", "").replace("\x08", "")
    if "\x00" in t:
        return None
    return t

def clean(t):
    t = t.replace("\r\n", "\n").replace("\t", "    ")
    t = re.sub(r"\n{4,}", "\n\n\n", t)
    return t.strip() + "\n"

def py_docs():
    root = sysconfig.get_paths()["stdlib"]
    for p in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(p, root)
        if rel.startswith(("site-packages", "encodings" + os.sep, "dist-packages")):
            continue
        t = read_text(p)
        if t and 200 <= len(t) <= 400_000:
            yield "pystdlib", "py:" + rel, t

def info_docs():
    files = sorted(glob.glob("/usr/share/info/*.info*.gz"))
    manuals = {}
    for p in files:
        if p in EXCLUDED:
            continue
        base = os.path.basename(p)
        m = re.match(r"(.+?)\.info(?:-(\d+))?\.gz$", base)
        if not m:
            continue
        manuals.setdefault(m.group(1), []).append((int(m.group(2) or 0), p))
    for name in sorted(manuals):
        parts = [read_text(p, allow_nul=True) or "" for _, p in sorted(manuals[name])]
        text = "".join(parts)
        for i, node in enumerate(text.split("\x1f")):
            node = node.strip("\n")
            if node.startswith("Tag Table:") or node.startswith("Indirect:") or len(node) < 200:
                continue
            # drop the "File: x.info, Node: ..., Next: ..." header line
            lines = node.split("\n", 1)
            if lines[0].startswith("File:") and len(lines) > 1:
                node = lines[1]
            yield "info", "info:%s#%d" % (name, i), node

DOC_PAT = re.compile(r"^(readme|news|faq|todo|changelog|changes|history|authors|thanks)|\.(txt|md|rst)(\.gz)?$", re.I)

def doc_docs():
    for p in sorted(glob.glob("/usr/share/doc/**/*", recursive=True)):
        if not os.path.isfile(p) or os.path.islink(p) or p in EXCLUDED:
            continue
        base = os.path.basename(p)
        if not DOC_PAT.search(base) or base.startswith("copyright"):
            continue
        t = read_text(p)
        if not t or len(t) < 200:
            continue
        cap = 8_000 if re.match(r"(changelog|changes|news|history)", base, re.I) else 40_000
        yield "doc", "doc:" + os.path.relpath(p, "/usr/share/doc"), t[:cap]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".tinydata")
    ap.add_argument("--heldout-pct", type=float, default=2.0)
    ap.add_argument("--exclude-packages", default="", help="comma-separated Debian packages whose files to skip")
    a = ap.parse_args()
    for pkg in filter(None, a.exclude_packages.split(",")):
        r = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("make_data: --exclude-packages: dpkg -L %s failed: %s" % (pkg, r.stderr.strip()))
        EXCLUDED.update(r.stdout.split("\n"))
    os.makedirs(a.out, exist_ok=True)
    stats = {}
    seen = set()
    outs = {s: open(os.path.join(a.out, "docs_%s.jsonl" % s), "w") for s in ("train", "heldout")}
    for gen in (py_docs(), info_docs(), doc_docs()):
        for src, name, text in gen:
            text = clean(text)
            h = hashlib.sha1(text.encode()).hexdigest()
            if h in seen:          # exact duplicates (same README in several packages)
                continue
            seen.add(h)
            bucket = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10000
            split = "heldout" if bucket < a.heldout_pct * 100 else "train"
            outs[split].write(json.dumps({"src": src, "name": name, "text": text}) + "\n")
            st = stats.setdefault(src, {}).setdefault(split, {"docs": 0, "bytes": 0})
            st["docs"] += 1
            st["bytes"] += len(text.encode())
    for f in outs.values():
        f.close()
    info = {"python": sys.version.split()[0], "stdlib": sysconfig.get_paths()["stdlib"],
            "excluded_packages": sorted(filter(None, a.exclude_packages.split(","))), "sources": stats}
    with open(os.path.join(a.out, "sources.json"), "w") as f:
        json.dump(info, f, indent=1)
    json.dump(info, sys.stdout, indent=1)
    print()

if __name__ == "__main__":
    main()
