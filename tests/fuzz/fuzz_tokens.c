/* fuzz_tokens.c -- common/tokens.c's tokens_open_file on the input bytes as a token file (the input is
 * the file, exactly: a seed is a real token file and a crash's reproducer is one), opened with and
 * without loss weights and with three vocabularies (none, the golden models' 256, Qwen3's 151936);
 * then, for a file it accepts, the step loader as the trainers drive it: loader_init over a few
 * sequence lengths and data-parallel widths (some fixed, some from the file's last bytes), then
 * loader_window, loader_weights, loader_counted_job at a few steps (up to --steps' 1G),
 * loader_check_eval, loader_skipped_before and tokens_digest, checking what they promise. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "tokens.h"

static FuzzFile file;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    fuzz_file_open(&file, "fuzz_tokens");
    return 0;
}

static void drive(const TokenFile *tf, int64_t seq, int world, int rank) {
    Loader ld;
    char err[1024];
    if (loader_init(&ld, tf, seq, world, rank, err, sizeof err)) return;
    FUZZ_ASSERT(ld.windows >= world && ld.windows * seq + 1 <= tf->count, "%lld windows of %lld in %lld tokens",
                (long long)ld.windows, (long long)seq, (long long)tf->count);
    uint32_t *ids = xmalloc((size_t)(seq + 1) * 4);
    uint8_t *w = xmalloc((size_t)(seq + 1));
    const int64_t steps[] = {0, 1, 2, ld.windows, ld.windows + 1, (1ll << 30) - 1};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        const int64_t epoch = loader_window(&ld, steps[k], ids);
        FUZZ_ASSERT(epoch >= 0, "epoch %lld", (long long)epoch);
        const int64_t counted = loader_weights(&ld, steps[k], w);
        FUZZ_ASSERT(counted >= 0 && counted <= seq, "%lld labels of %lld count", (long long)counted, (long long)seq);
        const int64_t job = loader_counted_job(&ld, steps[k]);
        FUZZ_ASSERT(job >= 0 && job <= seq * world, "%lld labels of the job count", (long long)job);
    }
    for (int64_t e = 1; e <= 3; e++) loader_check_eval(&ld, e, err, sizeof err);
    loader_check_eval(&ld, ld.windows / world, err, sizeof err);
    FUZZ_ASSERT(loader_check_eval(&ld, ld.windows / world + 1, err, sizeof err) == -1, "an evaluation past the file");
    const int64_t skipped = loader_skipped_before(&ld, 4);
    FUZZ_ASSERT(skipped >= 0 && skipped <= 4, "%lld of 4 steps skipped", (long long)skipped);
    free(ids);
    free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file_set(&file, data, size, 0);
    static const int64_t VOCAB[] = {0, 256, 151936};
    for (int with_weights = 0; with_weights <= 1; with_weights++)
        for (size_t v = 0; v < sizeof VOCAB / sizeof VOCAB[0]; v++) {
            TokenFile tf;
            char err[1024];
            err[0] = 0;
            if (tokens_open_file(file.path, VOCAB[v], with_weights, &tf, err, sizeof err)) {
                FUZZ_ASSERT(err[0], "a refused token file without a message");
                fuzz_say("vocab %lld, with_weights %d: refused: %s\n", (long long)VOCAB[v], with_weights, err);
                continue;
            }
            FUZZ_ASSERT(tf.count >= 0 && tf.counted >= 0 && tf.counted <= tf.count, "%lld tokens, %lld counted",
                        (long long)tf.count, (long long)tf.counted);
            FUZZ_ASSERT(with_weights || !tf.weights, "loss weights read by a reader that takes ids alone");
            fuzz_say("vocab %lld, with_weights %d: %lld tokens, %lld count\n", (long long)VOCAB[v], with_weights,
                     (long long)tf.count, (long long)tf.counted);
            volatile int64_t d = tokens_digest(&tf);
            (void)d;
            /* sequence lengths: the smallest, one from the file's last bytes, the largest that fits */
            const uint8_t b1 = size ? data[size - 1] : 0, b2 = size > 1 ? data[size - 2] : 0;
            const int64_t seqs[] = {1, 2, 1 + b1 % 16, 1 + (b1 | b2 << 8) % 257, tf.count / 3, tf.count - 1};
            for (size_t s = 0; s < sizeof seqs / sizeof seqs[0]; s++) {
                if (seqs[s] < 1) continue;
                const int world = 1 + (int)((b2 + s) % 3);
                drive(&tf, seqs[s], world, (int)(b1 % world));
                if (s == 0) drive(&tf, seqs[s], 1, 0);
            }
            tokens_close(&tf);
        }
    return 0;
}
