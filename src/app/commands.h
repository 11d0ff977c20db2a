/* commands.h — the subcommands of the `nf` program (tools/nf.c is only a dispatcher over this table).
 *
 * Each command receives argc/argv starting at its own name (argv[0] = "tokenize") and returns the process
 * exit status. Commands live in src/app/ so tests can call them through the library. To add one: declare it
 * here, implement it in src/app/, add one line to the table in tools/nf.c. */
#ifndef NF_APP_COMMANDS_H
#define NF_APP_COMMANDS_H

typedef int (*nf_command_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    nf_command_fn fn;
    const char *summary;
} nf_command;

/* src/app/cmd_text.c */
int nf_cmd_tokenize(int argc, char **argv);
int nf_cmd_detokenize(int argc, char **argv);
int nf_cmd_render(int argc, char **argv);

/* src/app/cmd_info.c: nf info MODEL — load a model (every tensor bound and checked), print its summary */
int nf_cmd_info(int argc, char **argv);

/* src/app/cmd_logits.c: nf logits -m MODEL --tokens IDS --out OUT.f32 — teacher-forced logits of every position */
int nf_cmd_logits(int argc, char **argv);

/* src/app/cmd_chat.c: nf run -p PROMPT (one-shot generation), nf chat (interactive, state kept between turns) */
int nf_cmd_run(int argc, char **argv);
int nf_cmd_chat(int argc, char **argv);

#endif
