/* fuzz_ckpt.c -- common/ckpt.c's ckpt_resolve (what --resume PATH reads) on a save directory built
 * from the input in a fresh directory under the harness's private temporary directory, then
 * ckpt_list on it; the tree is removed after each input.
 *
 * Input: byte 0 picks the path given to --resume (below), then one entry per line, its first
 * character the kind and the rest its name (at most 64 characters; '/' and NUL dropped; ".", ".." and
 * empty names skipped; at most 24 entries):
 *   d NAME   a directory holding trainer_state.safetensors (a complete step-N when so named)
 *   e NAME   a directory without it (an incomplete one: step-N.partial, or a save being removed)
 *   f NAME   a regular file
 *   t NAME   a directory whose trainer_state.safetensors is itself a directory
 *   l NAME   the symbolic link ROOT/latest -> NAME (relative, as ckpt_commit writes it)
 *   a NAME   ROOT/latest -> ROOT/NAME (absolute)
 *   s NAME   the symbolic link ROOT/NAME -> the previous entry's name
 *   r        ROOT itself holds trainer_state.safetensors (the older one-directory layout)
 * Path (byte 0 % 6): ROOT, ROOT/ (trailing slashes), ROOT/FIRST (the first entry's name), ROOT/FIRST/,
 * ROOT/latest, ROOT/missing.
 *
 * Checked: a refusal has a message, a resolved path stays inside the tree, ckpt_list is sorted, the
 * resolved directory holds a trainer state (a "step-05" once listed as step 5 resolved to a step-5
 * that did not exist), and ckpt_list with max 1 gives the newest step (what ckpt_resolve takes when
 * latest is missing or broken; it once gave the first in readdir's order): findings 3 and 4 of
 * tests/fuzz/README.md, fixed. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "ckpt.h"

static char root[600];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    snprintf(root, sizeof root, "%s/save", fuzz_tmpdir());
    return 0;
}

static void touch(const char *dir, const char *name) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fuzz_write_path(p, "", 0, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    FUZZ_ASSERT(!fuzz_rm_tree(root), "cannot clear %s: %s", root, strerror(errno));
    FUZZ_ASSERT(!mkdir(root, 0755), "mkdir %s: %s", root, strerror(errno));
    char first[80] = "", prev[80] = "";
    int entries = 0;
    for (size_t at = 1; at < size && entries < 24;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        const size_t end = nl ? (size_t)(nl - data) : size;
        const char kind = (char)data[at];
        char name[80];
        size_t n = 0;
        for (size_t i = at + 1; i < end && n < 64; i++)
            if (data[i] != '/' && data[i] != 0) name[n++] = (char)data[i];
        name[n] = 0;
        at = end + 1;
        if (kind == 'r') { /* unless an entry of that name is there already */
            char p[1200];
            struct stat sb;
            snprintf(p, sizeof p, "%s/trainer_state.safetensors", root);
            if (lstat(p, &sb)) touch(root, "trainer_state.safetensors");
            continue;
        }
        if (!n || !strcmp(name, ".") || !strcmp(name, "..")) continue;
        char p[1200], q[1200];
        snprintf(p, sizeof p, "%s/%s", root, name);
        struct stat sb;
        const int exists = !lstat(p, &sb);
        int made = 0;
        switch (kind) {
        case 'd':
        case 'e':
        case 't':
            if (exists || mkdir(p, 0755)) break;
            if (kind == 'd') touch(p, "trainer_state.safetensors");
            if (kind == 't') snprintf(q, sizeof q, "%s/trainer_state.safetensors", p), mkdir(q, 0755);
            made = 1;
            break;
        case 'f':
            if (!exists) touch(root, name), made = 1;
            break;
        case 'l':
        case 'a':
            snprintf(q, sizeof q, "%s/" CKPT_LATEST, root);
            unlink(q);
            if (kind == 'l') made = !symlink(name, q);
            else snprintf(p, sizeof p, "%s/%s", root, name), made = !symlink(p, q);
            break;
        case 's':
            if (!exists && prev[0]) made = !symlink(prev, p);
            break;
        default: break;
        }
        if (!made) continue;
        entries++;
        if (kind != 'l' && kind != 'a') {
            if (!first[0]) snprintf(first, sizeof first, "%s", name);
            snprintf(prev, sizeof prev, "%s", name);
        }
    }

    char path[1200];
    switch (data[0] % 6) {
    case 0: snprintf(path, sizeof path, "%s", root); break;
    case 1: snprintf(path, sizeof path, "%s//", root); break;
    case 2: snprintf(path, sizeof path, "%s/%s", root, first); break;
    case 3: snprintf(path, sizeof path, "%s/%s/", root, first); break;
    case 4: snprintf(path, sizeof path, "%s/" CKPT_LATEST, root); break;
    default: snprintf(path, sizeof path, "%s/missing", root); break;
    }
    char out[CKPT_PATH], note[4096], err[CKPT_PATH + 512];
    out[0] = err[0] = 0;
    const int rc = ckpt_resolve(path, out, sizeof out, note, sizeof note, err, sizeof err);
    fuzz_say("--resume %s: %s%s%s", path + strlen(root) - 4, rc ? err : out + strlen(root) - 4, rc ? "\n" : "\n",
             note);
    if (rc) FUZZ_ASSERT(err[0], "a refused --resume without a message");
    else FUZZ_ASSERT(!strncmp(out, root, strlen(root)), "resolved %s outside the tree: %s", path, out);
    int64_t s[64], s1[1] = {-1};
    const int64_t n = ckpt_list(root, s, 64);
    for (int64_t i = 1; i < n; i++) FUZZ_ASSERT(s[i - 1] >= s[i], "ckpt_list not newest first");
    {
        /* what it resolved to is a directory holding a trainer state */
        char st[CKPT_PATH + 64];
        snprintf(st, sizeof st, "%s/trainer_state.safetensors", out);
        struct stat sb;
        FUZZ_ASSERT(rc || (!stat(st, &sb) && S_ISREG(sb.st_mode)), "resolved %s -> %s, which holds no trainer state",
                    path, out);
        /* "the newest complete step-N": ckpt_list(max 1) is what ckpt_resolve takes it from */
        FUZZ_ASSERT(!n || (ckpt_list(root, s1, 1) == 1 && s1[0] == s[0]), "ckpt_list(max 1) gives step %lld, not the "
                    "newest, %lld: ckpt_resolve then takes an older save when latest is missing or broken",
                    (long long)s1[0], (long long)s[0]);
    }
    FUZZ_ASSERT(!fuzz_rm_tree(root), "cannot clear %s: %s", root, strerror(errno));
    return 0;
}
