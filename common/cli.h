/* cli.h -- command-line options from one table: parsing with clear errors, and --help text
 * generated from the same table so the two never disagree. Integers take K/M/G suffixes
 * (powers of two: --seq 128K = 131072, 1M = 1048576), checked for overflow. Every number has a
 * range, written in the table beside the option and printed by --help: a value outside it, or a
 * float that is not finite, is refused naming the option. */
#ifndef LONGCTX_CLI_H
#define LONGCTX_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* OPT_OPTSTR: a flag that may take a word (const char**): alone it sets "", "--flag W" sets W
 * unless W starts with '-' (the next option) -- but a negative number ("-1") is its value, for the
 * option to refuse by name. */
typedef enum { OPT_INT, OPT_DOUBLE, OPT_STRING, OPT_FLAG, OPT_OPTSTR } OptType;

typedef struct {
    const char *name;   /* "--seq" */
    OptType type;
    void *dst;          /* int64_t*, double*, const char**, int*, const char** */
    const char *help;   /* one line; the default is printed from *dst */
    const char *range;  /* OPT_INT, OPT_DOUBLE: the values taken, "[2,4G]", "(0,inf)", "[0,1)" ('[' and
                         * ']' include the bound, '(' and ')' do not); required for numbers. OPT_STRING:
                         * NULL (any word), or the words it takes, "fp32|bf16" */
} Opt;

/* Returns 0 on success, 1 when --help/-h was given, -1 with a message in err. Sets longctx_prog
 * (check.h) to argv[0]'s last component, the name user errors carry. */
int cli_parse(int argc, char **argv, const Opt *opts, int n, char *err, size_t errlen);
void cli_usage(FILE *f, const char *prog, const char *summary, const Opt *opts, int n);
/* "131072" / "128K" / "1M" -> value; -1 on a bad number or one past int64 */
int cli_parse_int(const char *s, int64_t *out);
/* A 52-bit digest of the values the last successful cli_parse left in its table (given or default;
 * "--seq 16K" and "--seq 16384" are one value, the order of the words does not count), except
 * those a node may give differently: --node-rank, and --log, --trace, --timeline, --profile (only
 * the printing rank writes them). The nodes of a job compare it: every node runs the same command. */
int64_t cli_options_digest(void);
/* 1 if the option was given on the command line ("--model X" or "--model=X"), not defaulted */
int cli_given(int argc, char **argv, const char *name);

/* s: "all", "none" or a comma list of the n names; *flags[k] = 1 for each name given (all: every
 * one), else 0. -1 with err naming the word that is none of them. */
int cli_parse_set(const char *s, const char *const *names, int *const *flags, int n, char *err, size_t errlen);

#endif
