/* sp-bench gen-log: synthetic allocation logs in RMM's CSV format, one per workload shape, for
 * replay. Each is seeded (the same options and seed give the same bytes) and frees everything it
 * allocates. Pointers are never reused, so every log is valid whatever the sizes.
 *
 *   serving   requests on S streams, randomly interleaved; each allocates up to 8 buffers with
 *             serve's mix (KiB metadata, 1-8 MiB activations, a 16-48 MiB KV block), frees all.
 *   training  steps of a decoder-only transformer on one stream: weights for the whole run;
 *             per step a sequence length drawn in [seq/2, seq] (multiples of 64); forward keeps
 *             each layer's activations (layer-norm outputs, qkv, attention output, projection,
 *             MLP up and GELU at 4x hidden, MLP down) with a short-lived attention workspace,
 *             then logits; backward walks the layers in reverse, with gradient temporaries,
 *             frees each layer's activations and allocates its weight gradients; the optimizer
 *             step allocates Adam's two fp32 states once (kept to the end) and a temporary per
 *             tensor, then the gradients are freed (zero_grad to None). fp16 tensors.
 *   forward   training's model and options, forward only (activations kept, no backward: an
 *             evaluation that keeps the graph, or a loss never backpropagated): weights for the
 *             run; per step the same draw of sequence length, the embedded input, each layer's
 *             activations allocated in order (and the short-lived attention workspace), the
 *             logits; all kept to the step's end, then freed newest first, as dropping the
 *             graph releases them.
 *   llm       continuous batching on one stream (32 layers, 8 KV heads of 128, fp16: 128 KiB of
 *             KV cache per token; hidden 4096, vocabulary 32000): requests arrive over time
 *             with log-uniform prompt and output lengths, wait for one of max-batch slots, are
 *             prefilled (up to 4 a step, with activation temporaries for their prompt tokens),
 *             then decode one token a step (hidden-state and fp32 logits temporaries per step);
 *             the KV cache grows a block of block-tokens tokens at a time, or (block-tokens 0)
 *             as one buffer per sequence that is reallocated at twice the size when full; a
 *             sequence frees its cache when its output is done, so requests finish out of order.
 *   tenants   T tenants with S streams each, serving requests as above on their own pool (a
 *             seventh column names it); tenant 0 is noisy: its buffers are noisy-factor times
 *             larger and it comes in bursts. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char *const shape_names[SHAPE_COUNT] = {"serving", "training", "llm", "tenants",
                                                      "forward"};

const char *genlog_shape_name(log_shape s)
{
    return s < SHAPE_COUNT ? shape_names[s] : "?";
}

int genlog_shape_parse(const char *name, log_shape *out)
{
    for (int i = 0; i < SHAPE_COUNT; i++)
        if (strcmp(name, shape_names[i]) == 0) {
            *out = (log_shape)i;
            return 0;
        }
    return -1;
}

void genlog_defaults(genlog_options *g)
{
    *g = (genlog_options){
        .shape = SHAPE_SERVING, .seed = 1,
        .requests = 2000, .streams = 8,
        .layers = 12, .hidden = 1024, .batch = 8, .seq = 1024, .steps = 3,
        .llm_requests = 256, .max_batch = 32, .block_tokens = 16, .max_prompt = 2048,
        .max_output = 1024,
        .tenants = 4, .noisy_factor = 4,
    };
}

/* ---- the writer ---- */

typedef struct {
    FILE *f;
    uint64_t rng, next_ptr, t;
    bool tenant_column;
} writer;

/* One log line: advances the clock, then writes the event (allocate or free) for p. */
static void emit(writer *w, const char *event, uint64_t p, size_t size, int stream, int tenant)
{
    w->t += 1 + rng_next(&w->rng) % 50;
    fprintf(w->f, "0,%" PRIu64 ".%06" PRIu64 ",%s,0x%" PRIx64 ",%zu,0x%x", w->t / 1000000,
            w->t % 1000000, event, p, size, 0x1000 + stream);
    if (w->tenant_column)
        fprintf(w->f, ",tenant-%d", tenant);
    fputc('\n', w->f);
}

static uint64_t emit_alloc(writer *w, size_t size, int stream, int tenant)
{
    uint64_t p = w->next_ptr;
    w->next_ptr += (size + 0xfff) & ~(uint64_t)0xfff;
    emit(w, "allocate", p, size, stream, tenant);
    return p;
}

static void emit_free(writer *w, uint64_t p, size_t size, int stream, int tenant)
{
    emit(w, "free", p, size, stream, tenant);
}

typedef struct {
    uint64_t ptr;
    size_t size;
} tensor;

static tensor talloc(writer *w, size_t size)
{
    return (tensor){emit_alloc(w, size, 0, 0), size};
}

static void tfree(writer *w, tensor *t)
{
    if (t->ptr)
        emit_free(w, t->ptr, t->size, 0, 0);
    t->ptr = 0;
}

/* ---- serving and tenants: interleaved requests ---- */

typedef struct {
    uint64_t ptr[8];
    size_t size[8];
    int n;
    bool open;
} request;

/* streams = tenants x per_tenant; a tenant is streams / per_tenant; tenant 0 is noisy when
 * noisy > 1. */
static void gen_requests(writer *w, long requests, int tenants, int per_tenant, int noisy)
{
    int streams = tenants * per_tenant;
    request *active = calloc((size_t)streams, sizeof *active);
    long started = 0, finished = 0, picks = 0;
    while (active && finished < requests) {
        int s = (int)(rng_next(&w->rng) % (uint64_t)streams);
        /* the noisy tenant's bursts: a quarter of every 1,000 picks, three in four are its own */
        if (noisy > 1 && picks++ % 1000 < 250 && rng_next(&w->rng) % 4 != 0)
            s = (int)(rng_next(&w->rng) % (uint64_t)per_tenant);
        int tenant = s / per_tenant;
        request *q = &active[s];
        if (!q->open && started < requests) {
            q->open = true;
            q->n = 0;
            started++;
        }
        if (!q->open)
            continue;
        if (q->n < 8 && rng_next(&w->rng) % 3 != 0) {
            size_t size = bench_request_buffer_size(&w->rng, q->n);
            if (tenant == 0 && noisy > 1)
                size *= (size_t)noisy;
            q->size[q->n] = size;
            q->ptr[q->n] = emit_alloc(w, size, s, tenant);
            q->n++;
        } else {
            for (int i = 0; i < q->n; i++)
                emit_free(w, q->ptr[i], q->size[i], s, tenant);
            q->open = false;
            finished++;
        }
    }
    free(active);
}

/* ---- training ---- */

enum { SAVED_PER_LAYER = 8 };

/* The model both shapes run: an embedding (tied to the output layer) and four weight matrices a
 * layer, fp16. */
typedef struct {
    size_t h, vocab, heads;
    size_t weight_sizes[4];
    int L;
} model;

static model model_of(const genlog_options *g)
{
    const size_t h = (size_t)g->hidden;
    return (model){h, 32000, h / 64 ? h / 64 : 1,
                   {3 * h * h * 2, h * h * 2, 4 * h * h * 2, 4 * h * h * 2}, g->layers};
}

/* weights[L * 4] is the embedding, weights[l * 4 + k] layer l's k-th matrix. */
static void alloc_weights(writer *w, const model *m, tensor *weights)
{
    weights[m->L * 4] = talloc(w, m->vocab * m->h * 2);
    for (int l = 0; l < m->L; l++)
        for (int k = 0; k < 4; k++)
            weights[l * 4 + k] = talloc(w, m->weight_sizes[k]);
}

/* A step's sequence length: in [seq/2, seq], a multiple of 64. */
static size_t step_seq(writer *w, const genlog_options *g)
{
    size_t half = (size_t)g->seq / 2 / 64 ? (size_t)g->seq / 2 / 64 : 1;
    return 64 * (half + rng_next(&w->rng) % (half + 1));
}

/* Every layer's forward, keeping its activations in saved[l * SAVED_PER_LAYER ..]; T is the
 * bytes of one hidden-sized activation. */
static void forward_layers(writer *w, const genlog_options *g, const model *m, size_t seq,
                           size_t T, tensor *saved)
{
    for (int l = 0; l < m->L; l++) {
        tensor *s = &saved[l * SAVED_PER_LAYER];
        s[0] = talloc(w, T);                                    /* layer norm 1 */
        s[1] = talloc(w, 3 * T);                                /* qkv */
        tensor ws = talloc(w, (size_t)g->batch * m->heads * seq * seq * 2); /* scores */
        s[2] = talloc(w, T);                                    /* attention output */
        tfree(w, &ws);
        s[3] = talloc(w, T);                                    /* projection + residual */
        s[4] = talloc(w, T);                                    /* layer norm 2 */
        s[5] = talloc(w, 4 * T);                                /* MLP up */
        s[6] = talloc(w, 4 * T);                                /* GELU */
        s[7] = talloc(w, T);                                    /* MLP down + residual */
    }
}

static void gen_training(writer *w, const genlog_options *g)
{
    const model m = model_of(g);
    const size_t h = m.h, vocab = m.vocab, heads = m.heads;
    const size_t *weight_sizes = m.weight_sizes;
    int L = g->layers;
    tensor *weights = calloc((size_t)L * 4 + 1, sizeof *weights);
    tensor *grads = calloc((size_t)L * 4 + 1, sizeof *grads);
    tensor *adam = calloc(((size_t)L * 4 + 1) * 2, sizeof *adam);
    tensor *saved = calloc((size_t)L * SAVED_PER_LAYER, sizeof *saved);
    if (!weights || !grads || !adam || !saved)
        goto out;
    alloc_weights(w, &m, weights);
    for (int step = 0; step < g->steps; step++) {
        size_t seq = step_seq(w, g);
        size_t tok = (size_t)g->batch * seq, T = tok * h * 2;
        tensor x = talloc(w, T); /* embedded input */
        forward_layers(w, g, &m, seq, T, saved);
        tensor logits = talloc(w, tok * vocab * 2);
        tensor dlogits = talloc(w, tok * vocab * 2);
        tfree(w, &logits);
        tensor dx = talloc(w, T);
        tfree(w, &dlogits);
        if (!grads[L * 4].ptr)
            grads[L * 4] = talloc(w, weights[L * 4].size);
        for (int l = L - 1; l >= 0; l--) {
            tensor *s = &saved[l * SAVED_PER_LAYER];
            for (int k = 3; k >= 0; k--) /* weight gradients, as the layer's backward makes them */
                if (!grads[l * 4 + k].ptr)
                    grads[l * 4 + k] = talloc(w, weight_sizes[k]);
            tensor dup = talloc(w, 4 * T); /* gradient through GELU and MLP up */
            tfree(w, &s[7]);
            tfree(w, &s[6]);
            tfree(w, &s[5]);
            tensor dmid = talloc(w, T);
            tfree(w, &dup);
            tfree(w, &s[4]);
            tfree(w, &s[3]);
            tensor dqkv = talloc(w, 3 * T);
            tensor ws = talloc(w, (size_t)g->batch * heads * seq * seq * 2); /* recomputed */
            tfree(w, &ws);
            tfree(w, &s[2]);
            tfree(w, &s[1]);
            tfree(w, &s[0]);
            tensor dnext = talloc(w, T);
            tfree(w, &dqkv);
            tfree(w, &dmid);
            tfree(w, &dx);
            dx = dnext;
        }
        tfree(w, &dx);
        tfree(w, &x);
        for (int i = 0; i <= L * 4; i++) { /* optimizer: Adam, fp32 state */
            size_t numel = weights[i].size / 2;
            if (!adam[2 * i].ptr) {
                adam[2 * i] = talloc(w, numel * 4);
                adam[2 * i + 1] = talloc(w, numel * 4);
            }
            tensor tmp = talloc(w, numel * 4);
            tfree(w, &tmp);
        }
        for (int i = 0; i <= L * 4; i++)
            tfree(w, &grads[i]);
    }
    for (int i = 0; i <= L * 4; i++) {
        tfree(w, &adam[2 * i]);
        tfree(w, &adam[2 * i + 1]);
        tfree(w, &weights[i]);
    }
out:
    free(weights);
    free(grads);
    free(adam);
    free(saved);
}

/* ---- forward: training's forward, kept to the step's end ---- */

static void gen_forward(writer *w, const genlog_options *g)
{
    const model m = model_of(g);
    int L = g->layers;
    tensor *weights = calloc((size_t)L * 4 + 1, sizeof *weights);
    tensor *saved = calloc((size_t)L * SAVED_PER_LAYER, sizeof *saved);
    if (!weights || !saved)
        goto out;
    alloc_weights(w, &m, weights);
    for (int step = 0; step < g->steps; step++) {
        size_t seq = step_seq(w, g);
        size_t tok = (size_t)g->batch * seq, T = tok * m.h * 2;
        tensor x = talloc(w, T); /* embedded input */
        forward_layers(w, g, &m, seq, T, saved);
        tensor logits = talloc(w, tok * m.vocab * 2);
        tfree(w, &logits); /* the step's end: everything it kept, newest first */
        for (int i = L * SAVED_PER_LAYER - 1; i >= 0; i--)
            tfree(w, &saved[i]);
        tfree(w, &x);
    }
    for (int i = 0; i <= L * 4; i++)
        tfree(w, &weights[i]);
out:
    free(weights);
    free(saved);
}

/* ---- llm: continuous batching ---- */

typedef struct {
    long prompt, output, generated, len;
    tensor *blocks;   /* block mode */
    long n_blocks, cap_blocks;
    tensor whole;     /* whole-sequence mode */
    long whole_tokens;
} sequence;

static long log_uniform_long(uint64_t *rng, long lo, long hi)
{
    return (long)exp(log((double)lo) + rng_unit(rng) * (log((double)hi) - log((double)lo)));
}

static void kv_grow(writer *w, sequence *q, long tokens, int block_tokens)
{
    const size_t per_token = 32 * 2 * 8 * 128 * 2; /* layers x (K, V) x kv heads x dim x fp16 */
    if (block_tokens > 0) {
        while (q->n_blocks * block_tokens < tokens) {
            if (q->n_blocks == q->cap_blocks) {
                long cap = q->cap_blocks ? q->cap_blocks * 2 : 16;
                tensor *grown = realloc(q->blocks, (size_t)cap * sizeof *grown);
                if (!grown)
                    return;
                q->blocks = grown;
                q->cap_blocks = cap;
            }
            q->blocks[q->n_blocks++] = talloc(w, per_token * (size_t)block_tokens);
        }
    } else if (q->whole_tokens < tokens) {
        long cap = q->whole_tokens ? q->whole_tokens : 16;
        while (cap < tokens)
            cap *= 2;
        tensor bigger = talloc(w, per_token * (size_t)cap); /* then copy, then free the old */
        tfree(w, &q->whole);
        q->whole = bigger;
        q->whole_tokens = cap;
    }
}

static void kv_free(writer *w, sequence *q)
{
    for (long i = 0; i < q->n_blocks; i++)
        tfree(w, &q->blocks[i]);
    free(q->blocks);
    tfree(w, &q->whole);
    memset(q, 0, sizeof *q);
}

static void gen_llm(writer *w, const genlog_options *g)
{
    const size_t hidden = 4096, vocab = 32000;
    sequence *slot = calloc((size_t)g->max_batch, sizeof *slot);
    bool *busy = calloc((size_t)g->max_batch, sizeof *busy);
    long arrived = 0, admitted = 0, done = 0;
    if (!slot || !busy)
        goto out;
    while (done < g->llm_requests) {
        /* arrivals: 0-2 a step (one a step on average), until all have come */
        long come = (long)(rng_next(&w->rng) % 3);
        arrived = arrived + come < g->llm_requests ? arrived + come : g->llm_requests;
        /* prefill up to 4 waiting requests into free slots */
        long prefill_tokens = 0;
        int pre[4], n_pre = 0;
        for (int i = 0; i < g->max_batch && n_pre < 4 && admitted < arrived; i++) {
            if (busy[i])
                continue;
            sequence *q = &slot[i];
            memset(q, 0, sizeof *q);
            q->prompt = log_uniform_long(&w->rng, 16, g->max_prompt > 16 ? g->max_prompt : 17);
            q->output = log_uniform_long(&w->rng, 8, g->max_output > 8 ? g->max_output : 9);
            q->len = q->prompt;
            busy[i] = true;
            admitted++;
            pre[n_pre++] = i;
            prefill_tokens += q->prompt;
        }
        tensor ph = {0}, pm = {0};
        if (n_pre) {
            ph = talloc(w, (size_t)prefill_tokens * hidden * 2);     /* hidden states */
            pm = talloc(w, (size_t)prefill_tokens * 4 * hidden * 2); /* MLP intermediate */
            for (int i = 0; i < n_pre; i++)
                kv_grow(w, &slot[pre[i]], slot[pre[i]].len, g->block_tokens);
            tfree(w, &pm);
            tfree(w, &ph);
        }
        /* one decode step for every running sequence */
        long batch = 0;
        for (int i = 0; i < g->max_batch; i++)
            batch += busy[i];
        if (batch) {
            tensor h = talloc(w, (size_t)batch * hidden * 2);
            tensor logits = talloc(w, (size_t)batch * vocab * 4);
            for (int i = 0; i < g->max_batch; i++) {
                if (!busy[i])
                    continue;
                sequence *q = &slot[i];
                q->len++;
                q->generated++;
                kv_grow(w, q, q->len, g->block_tokens);
            }
            tfree(w, &logits);
            tfree(w, &h);
            for (int i = 0; i < g->max_batch; i++)
                if (busy[i] && slot[i].generated >= slot[i].output) {
                    kv_free(w, &slot[i]);
                    busy[i] = false;
                    done++;
                }
        }
    }
out:
    free(slot);
    free(busy);
}

int bench_generate_log(const char *path, const genlog_options *g)
{
    if (g->requests <= 0 || g->streams <= 0 || g->layers <= 0 || g->hidden <= 0 ||
        g->batch <= 0 || g->seq <= 0 || g->steps <= 0 || g->llm_requests <= 0 ||
        g->max_batch <= 0 || g->block_tokens < 0 || g->max_prompt <= 0 || g->max_output <= 0 ||
        g->tenants <= 0 || g->tenants > BENCH_MAX_TENANTS || g->noisy_factor <= 0) {
        fprintf(stderr, "gen-log: an option is out of range\n");
        return 2;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gen-log: %s: %s\n", path, strerror(errno));
        return 2;
    }
    writer w = {f, g->seed, 0x7f0000000000ull, 0, g->shape == SHAPE_TENANTS};
    fprintf(f, "Thread,Time,Action,Pointer,Size,Stream%s\n", w.tenant_column ? ",Pool" : "");
    switch (g->shape) {
    case SHAPE_SERVING: gen_requests(&w, g->requests, 1, g->streams, 1); break;
    case SHAPE_TRAINING: gen_training(&w, g); break;
    case SHAPE_FORWARD: gen_forward(&w, g); break;
    case SHAPE_LLM: gen_llm(&w, g); break;
    case SHAPE_TENANTS:
        gen_requests(&w, g->requests * g->tenants, g->tenants, g->streams, g->noisy_factor);
        break;
    default: break;
    }
    return fclose(f) == 0 ? 0 : 2;
}
