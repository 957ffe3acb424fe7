/* corpus_tool.c -- the project's own writers, for tests/fuzz/make_corpus.sh: what they write is what
 * the fuzzers' seeds are made of. Built by make_corpus.sh with the system compiler (no sanitizers).
 *
 *   corpus_tool config OUT.json MODEL [YARN_FACTOR YARN_ORIGINAL]
 *       config_load(MODEL) (a size name or a directory), optionally config_set_yarn, config_write_json
 *   corpus_tool model MODEL OUT [SHARD_BYTES]
 *       the model's weights as the trainers save them (BF16): one file OUT, or with SHARD_BYTES the
 *       directory OUT as st_plan_dir lays it out (shards + index when larger). Headers and sizes only:
 *       st_plan_create makes the files sparse, the data is never written
 *   corpus_tool state MODEL OUT STEP      a trainer_state.safetensors as state_save lays it out
 *   corpus_tool dump MODEL OUT            a --dump-grads file as state_dump lays it out
 *   corpus_tool ckpt ROOT N[.partial|.old]...
 *       a --save root: for N, ckpt_begin + a trainer state + ckpt_commit (keep all); N.partial: only
 *       ckpt_begin and a trainer state (a save that stopped); N.old: step-N renamed step-N.old (a re-save
 *       that stopped between its renames)
 *   corpus_tool rdv-file OUT RUN_ID NNODES GPUS          rdv_publish
 *   corpus_tool rdv-hello OUT RUN_ID NODE_RANK NNODES GPUS
 *       the hello rdv_tcp_await says (caught by a listener on 127.0.0.1 that sent it a challenge)
 *   corpus_tool rdv-answer OUT HELLO RUN_ID NNODES GPUS
 *       node 0's challenge and what rdv_tcp_serve (node 0 of RUN_ID, NNODES x GPUS) answers the hello in
 *       the file HELLO, proved anew for that challenge (both sides hold the tool's secret) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "config.h"
#include "model.h"
#include "rendezvous.h"
#include "safetensors.h"

static void load(const char *model, Qwen3Config *c, ParamTable *t) {
    char err[1024];
    if (config_load(model, c, err, sizeof err)) DIE("%s", err);
    params_build(c, t);
}

/* the table's tensors under a prefix, dtype d */
static StWrite *specs(const ParamTable *t, const char *prefix, StDtype d, char (*names)[112], StWrite *w) {
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        snprintf(names[i], 112, "%s%s", prefix, p->name);
        w[i] = (StWrite){names[i], d, p->ndim, {p->shape[0], p->shape[1]}, NULL};
    }
    return w;
}

static void create(StPlan *p) {
    char err[1024];
    if (st_plan_create(p, err, sizeof err)) DIE("%s", err);
    st_plan_free(p);
}

static void write_state(const ParamTable *t, const char *path, long long step) {
    StWrite *w = xcalloc((size_t)(3 * t->n), sizeof(StWrite));
    char (*names)[112] = xcalloc((size_t)(3 * t->n), 112);
    static const char *const prefix[3] = {"master.", "adam_m.", "adam_v."};
    for (int k = 0; k < 3; k++) specs(t, prefix[k], ST_F32, names + k * t->n, w + k * t->n);
    char meta[256];
    snprintf(meta, sizeof meta, "{\"step\":\"%lld\",\"seq\":\"%d\",\"data\":\"%s\"}", step, 64, "data/books.tok");
    StPlan p;
    st_plan_file(&p, path, w, 3 * t->n, meta);
    create(&p);
    free(w);
    free(names);
}

/* ---------------------------------------------------------------- rendezvous over loopback */
static int listen_loopback(int *port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4) || getsockname(fd, (struct sockaddr *)&a, &len))
        DIE("listen on 127.0.0.1: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}
static size_t xfer(int fd, void *buf, size_t n, int out) {
    size_t done = 0;
    while (done < n) {
        const ssize_t r = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
        if (r <= 0) break;
        done += (size_t)r;
    }
    return done;
}
static void save(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) DIE("cannot write %s", path);
}

static const RdvSecret *key(void) { /* the secret both sides of the tool hold (the harness proves anew) */
    static RdvSecret k;
    static const char s[] = "the-corpus-tool-job-secret";
    memcpy(k.key, s, sizeof s - 1), k.len = sizeof s - 1;
    return &k;
}

typedef struct {
    RdvTcp t;
    const char *run_id;
    int node_rank, nnodes, gpus;
    int fd;
} Job;
static void *await_thread(void *arg) {
    Job *j = arg;
    unsigned char id[RDV_ID_BYTES];
    uint64_t nonce;
    char err[512];
    rdv_tcp_try(&j->t, key(), j->run_id, j->node_rank, j->nnodes, j->gpus, 2.0, id, &nonce, err, sizeof err);
    return NULL;
}
static void *serve_thread(void *arg) {
    Job *j = arg;
    unsigned char id[RDV_ID_BYTES];
    for (int i = 0; i < RDV_ID_BYTES; i++) id[i] = (unsigned char)(i * 37 + 11);
    uint64_t nonce;
    char err[512];
    rdv_tcp_serve(j->fd, key(), j->run_id, j->nnodes, j->gpus, id, &nonce, 1.0, err, sizeof err);
    return NULL;
}

int main(int argc, char **argv) {
    char err[1024];
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "config") && (argc == 4 || argc == 6)) {
        Qwen3Config c;
        if (config_load(argv[3], &c, err, sizeof err)) DIE("%s", err);
        if (argc == 6) config_set_yarn(&c, atof(argv[4]), atoll(argv[5]));
        if (config_write_json(&c, argv[2], "bfloat16")) DIE("cannot write %s", argv[2]);
        return 0;
    }
    if ((!strcmp(cmd, "model") && (argc == 4 || argc == 5)) || (!strcmp(cmd, "dump") && argc == 4)) {
        Qwen3Config c;
        ParamTable t;
        load(argv[2], &c, &t);
        const int dump = !strcmp(cmd, "dump");
        StWrite *w = xcalloc((size_t)t.n + 1, sizeof(StWrite));
        char (*names)[112] = xcalloc((size_t)t.n, 112);
        if (dump) w[0] = (StWrite){"loss", ST_F32, 1, {1, 0}, NULL};
        specs(&t, dump ? "grad." : "", dump ? ST_F32 : ST_BF16, names, w + dump);
        StPlan p;
        if (argc == 5) {
            mkdir(argv[3], 0755);
            st_plan_dir(&p, argv[3], w, t.n, atoll(argv[4]));
        } else st_plan_file(&p, argv[3], w, t.n + dump, NULL);
        create(&p);
        free(w);
        free(names);
        return 0;
    }
    if (!strcmp(cmd, "state") && argc == 5) {
        Qwen3Config c;
        ParamTable t;
        load(argv[2], &c, &t);
        write_state(&t, argv[3], atoll(argv[4]));
        return 0;
    }
    if (!strcmp(cmd, "ckpt") && argc >= 3) {
        const char *root = argv[2];
        for (int i = 3; i < argc; i++) {
            char *end;
            const long long n = strtoll(argv[i], &end, 10);
            char dir[CKPT_PATH], path[CKPT_PATH + 64];
            if (!strcmp(end, ".old")) {
                char old[CKPT_PATH + 8];
                ckpt_step_dir(root, n, dir, sizeof dir);
                snprintf(old, sizeof old, "%s.old", dir);
                if (rename(dir, old)) DIE("rename %s: %s", dir, strerror(errno));
                continue;
            }
            if (ckpt_begin(root, n, err, sizeof err)) DIE("%s", err);
            ckpt_partial_dir(root, n, dir, sizeof dir);
            snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
            save(path, "", 0);
            if (!*end && ckpt_commit(root, n, 0, err, sizeof err)) DIE("%s", err);
        }
        return 0;
    }
    if (!strcmp(cmd, "rdv-file") && argc == 6) {
        unsigned char id[RDV_ID_BYTES];
        for (int i = 0; i < RDV_ID_BYTES; i++) id[i] = (unsigned char)(i * 37 + 11);
        uint64_t nonce;
        if (rdv_publish(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), id, &nonce, err, sizeof err)) DIE("%s", err);
        return 0;
    }
    if (!strcmp(cmd, "rdv-hello") && argc == 7) {
        int port;
        const int fd = listen_loopback(&port);
        Job j = {{"127.0.0.1", port}, argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), -1};
        pthread_t th;
        pthread_create(&th, NULL, await_thread, &j);
        const int c = accept(fd, NULL, NULL);
        unsigned char ch[RDV_TCP_CHALLENGE] = "LCRDT02", b[RDV_TCP_HELLO];
        ch[11] = 4; /* kind: challenge; its nonce all zero */
        if (c < 0 || xfer(c, ch, sizeof ch, 1) != sizeof ch || xfer(c, b, sizeof b, 0) != sizeof b)
            DIE("no hello from rdv_tcp_try");
        close(c);
        pthread_join(th, NULL);
        save(argv[2], b, sizeof b);
        return 0;
    }
    if (!strcmp(cmd, "rdv-answer") && argc == 7) {
        Job j = {{"", 0}, argv[4], 0, atoi(argv[5]), atoi(argv[6]), -1};
        j.fd = rdv_tcp_listen("127.0.0.1", 0, err, sizeof err);
        if (j.fd < 0) DIE("%s", err);
        const int port = rdv_tcp_port(j.fd);
        pthread_t th;
        pthread_create(&th, NULL, serve_thread, &j);
        unsigned char hello[RDV_TCP_HELLO], b[RDV_TCP_CHALLENGE + RDV_TCP_ANSWER];
        FILE *f = fopen(argv[3], "rb");
        if (!f || fread(hello, 1, sizeof hello, f) != sizeof hello) DIE("cannot read the hello %s", argv[3]);
        fclose(f);
        const int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) DIE("connect: %s", strerror(errno));
        if (xfer(c, b, RDV_TCP_CHALLENGE, 0) != RDV_TCP_CHALLENGE) DIE("no challenge from rdv_tcp_serve");
        rdv_tcp_proof(key(), RDV_PROOF_HELLO, b + 16, hello + RDV_TCP_HEAD, hello, RDV_TCP_HELLO - 32,
                      hello + RDV_TCP_HELLO - 32);
        xfer(c, hello, sizeof hello, 1);
        if (xfer(c, b + RDV_TCP_CHALLENGE, RDV_TCP_ANSWER, 0) != RDV_TCP_ANSWER) DIE("no answer from rdv_tcp_serve");
        close(c);
        pthread_join(th, NULL); /* served, or its 1 s timeout after a refusal */
        close(j.fd);
        save(argv[2], b, sizeof b);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of tests/fuzz/corpus_tool.c\n");
    return 2;
}
