#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the embedded tiny model (models/tiny/tokenizer.json).

Why: the tiny model must exercise the same tokenizer machinery as GLM-5.3-Flash (spec section 5): GGUF `gpt2`
model with the `glm4` pre-tokenizer, i.e. a regex split followed by GPT-2 byte-level mapping, and the GLM
special tokens in their released order, placed after the learned vocabulary exactly as in the release
(there: ids 154820.. after the BPE tokens; here: 8128..8163), with the embedding padded to 8192 rows
(the release pads 154856 used ids to 154880).

The split regex is the GLM-4/GLM-5 one (identical to cl100k's / llama.cpp's `chatglm4`/`glm4` pre-type):
  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
behaviour Isolated, then ByteLevel(add_prefix_space=false, use_regex=false); no normalizer.
Special tokens: as GLM-4.5/4.7/5 `added_tokens` (first 18 flagged special, the rest plain added tokens that
are still matched atomically).

Usage: python3 scripts/tiny_model/train_tokenizer.py [--data .tinydata] [--out models/tiny] [--bpe-size 8128]
"""
import argparse, json, os, sys
from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, decoders, processors, trainers

GLM4_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# GLM-4.5 / 4.7 / 5.x added tokens, in id order (release ids 154820 + index).
GLM_SPECIAL = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
    "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>",
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
]
N_FLAGGED_SPECIAL = 18
PADDED_VOCAB = 8192


def iter_texts(path):
    with open(path) as f:
        for line in f:
            yield json.loads(line)["text"]


def build(bpe_size):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM4_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    return tok, trainer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--out", default="models/tiny")
    ap.add_argument("--bpe-size", type=int, default=PADDED_VOCAB - 64)
    ap.add_argument("--chat-template", default="tests/data/chat/glm-5.3-flash.jinja",
                    help="GLM-5.3-Flash chat template to embed, if the file exists")
    a = ap.parse_args()
    tok, trainer = build(a.bpe_size)
    tok.train_from_iterator(iter_texts(os.path.join(a.data, "docs_train.jsonl")), trainer=trainer)
    assert tok.get_vocab_size() == a.bpe_size, tok.get_vocab_size()
    for i, t in enumerate(GLM_SPECIAL):
        at = AddedToken(t, special=i < N_FLAGGED_SPECIAL, normalized=False, single_word=False,
                        lstrip=False, rstrip=False)
        n = tok.add_special_tokens([at]) if i < N_FLAGGED_SPECIAL else tok.add_tokens([at])
        assert n == 1 and tok.token_to_id(t) == a.bpe_size + i, (t, tok.token_to_id(t))
    assert tok.get_vocab_size() <= PADDED_VOCAB

    from transformers import PreTrainedTokenizerFast
    eos = "<|endoftext|>"
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos,
                                 clean_up_tokenization_spaces=False, model_max_length=1048576,
                                 padding_side="left", do_lower_case=False, remove_space=False)
    if a.chat_template and os.path.exists(a.chat_template):
        hf.chat_template = open(a.chat_template).read()
        print("embedded chat template", a.chat_template)
    else:
        print("no chat template at", a.chat_template, "(not embedded)")
    os.makedirs(a.out, exist_ok=True)
    hf.save_pretrained(a.out)
    for extra in ("special_tokens_map.json",):
        p = os.path.join(a.out, extra)
        if os.path.exists(p):
            os.remove(p)
    ids = {t: tok.token_to_id(t) for t in GLM_SPECIAL}
    print("bpe", a.bpe_size, "total", tok.get_vocab_size(), "padded", PADDED_VOCAB,
          "eos/pad", ids[eos], "user", ids["<|user|>"], "observation", ids["<|observation|>"])
    s = "def f(x):\n    return x + 12345  # It's fine!\n\nThe GNU sed manual."
    enc = tok.encode(s)
    print(enc.tokens)
    assert tok.decode(enc.ids) == s


if __name__ == "__main__":
    main()
