/* hf_tokenizer.h — Hugging Face tokenizer files → GGUF tokenizer metadata.
 *
 * The converter (src/convert/) calls this once per model: it reads <hf_dir>/tokenizer.json (a byte-level BPE
 * "tokenizers" model: vocab, merges, added tokens) and, if present, <hf_dir>/tokenizer_config.json (chat
 * template, special-token names), and declares the llama.cpp-compatible keys on the writer:
 *   tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "glm4", tokenizer.ggml.tokens (string array, index =
 *   id, holes and the rows up to config.json's vocab_size filled with "[PAD<id>]"), tokenizer.ggml.token_type (i32: 1 normal, 3 control, 4 user-defined,
 *   5 unused), tokenizer.ggml.merges ("a b" strings in rank order), tokenizer.ggml.{eos,padding,bos,unknown,
 *   eot,eom}_token_id where known, tokenizer.chat_template when tokenizer_config.json has one.
 * The same reader is used by the tests to load a tokenizer.json directly (nf_tokenizer_load_hf in
 * tokenizer.h). */
#ifndef NF_TEXT_HF_TOKENIZER_H
#define NF_TEXT_HF_TOKENIZER_H

#include "gguf/gguf.h"

/* Returns 0, or -1 with nf_error() set (missing file, bad JSON, unsupported tokenizer model). */
int nf_tokenizer_write_gguf_meta(const char *hf_dir, gguf_writer *w);

#endif
