/* output_parser.h — split generated GLM-5.3-Flash text into reasoning, visible text and tool calls, streaming.
 *
 * The model writes  REASONING</think>ANSWER<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...
 * </tool_call>  and ends its turn with <|observation|> (after tool calls) or <|user|>. Text arrives in
 * arbitrary chunks (one token, several, a byte at a time), so a tag can be split across chunks: the parser
 * holds back any tail that could still become a tag, and any incomplete UTF-8 sequence, so every text
 * event is whole characters and no tag text ever leaks into visible output.
 *
 * Robustness rules (spec server.md §1.4, §3.3): a <tool_call> inside unclosed reasoning ends the reasoning
 * and is parsed as a tool call (recovered once); a second </think> in visible text is dropped; <think> in
 * visible text re-enters reasoning (interleaved thinking); an end token (<|user|>, <|observation|>,
 * <|endoftext|>) ends the turn and later input is ignored; a tool call still open at finish is recovered if
 * its name and every argument are complete, otherwise its raw text is returned as visible text.
 *
 * Tool-call arguments follow GLM's official parser (vLLM glm4_moe tool parser): the name is the text before
 * the first <arg_key>, keys are trimmed; a value whose parameter the tool schema declares "string" stays a
 * string; otherwise the trimmed value is parsed as JSON (Python literals True/False/None accepted) and kept
 * as a string if that fails. Unlike that parser, string values are not trimmed (the template writes them
 * raw, so this round-trips exactly). A body that is a JSON object {"name":..., "arguments":{...}} is also
 * accepted. */
#ifndef NF_TEXT_OUTPUT_PARSER_H
#define NF_TEXT_OUTPUT_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    NF_OUT_REASONING = 1, /* text: a chunk of reasoning */
    NF_OUT_TEXT = 2,      /* text: a chunk of visible answer */
    NF_OUT_TOOL_CALL = 3, /* name, arguments (object), text = raw body between the tags */
    NF_OUT_END = 4,       /* text = the end token that closed the turn */
} nf_out_kind;

typedef struct {
    nf_out_kind kind;
    const char *text;   /* not NUL-terminated; valid only during the callback */
    size_t len;
    const char *name;   /* NF_OUT_TOOL_CALL: NUL-terminated */
    json_t *arguments;  /* NF_OUT_TOOL_CALL: borrowed; json_incref to keep */
} nf_out_event;

typedef void (*nf_out_fn)(void *user, const nf_out_event *ev);

typedef struct {
    bool in_reasoning;    /* the prompt ended with <think> (thinking on): output starts as reasoning */
    const json_t *tools;  /* optional tools array (OpenAI shape or plain functions) for string-typed args */
} nf_output_parser_opts;

typedef struct nf_output_parser nf_output_parser;

nf_output_parser *nf_output_parser_new(const nf_output_parser_opts *opts, nf_out_fn fn, void *user);
void nf_output_parser_feed(nf_output_parser *p, const char *text, size_t len);
/* End of generation: flush what was held back. */
void nf_output_parser_finish(nf_output_parser *p);
/* True once an end token was seen. */
bool nf_output_parser_done(const nf_output_parser *p);
void nf_output_parser_free(nf_output_parser *p);

/* Parse one tool-call body (the text between <tool_call> and </tool_call>). Returns 0 with *name
 * (malloc'ed) and *args (new reference), or -1 with nf_error() if it is malformed. */
int nf_parse_tool_call(const char *body, size_t len, const json_t *tools, char **name, json_t **args);

#endif
