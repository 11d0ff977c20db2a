/* nf.c — the nextflash command-line program: `nf <command> [args]`, dispatching to src/app/ commands. */
#include <stdio.h>
#include <string.h>

#include "app/commands.h"
#include "util/error.h"

static const nf_command COMMANDS[] = {
    {"run", nf_cmd_run, "one-shot generation: chat template, streamed answer, speed (-p PROMPT [-m MODEL])"},
    {"chat", nf_cmd_chat, "interactive chat; the conversation stays in the model state between turns"},
    {"logits", nf_cmd_logits, "teacher-forced logits of every position (-m MODEL --tokens IDS --out OUT.f32)"},
    {"info", nf_cmd_info, "load a model (all tensors checked) and print its summary"},
    {"tokenize", nf_cmd_tokenize, "text -> token ids (-m MODEL.gguf|tokenizer.json)"},
    {"detokenize", nf_cmd_detokenize, "token ids -> text"},
    {"render", nf_cmd_render, "OpenAI-style messages JSON -> GLM-5.3-Flash prompt text"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: nf <command> [args]   (nf <command> --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
}

int main(int argc, char **argv) {
    nf_progname = "nf";
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "nf: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
