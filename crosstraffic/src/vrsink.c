/* vrsink: UDP sink for vrgen traffic.
 *
 * Receives with recvmmsg() and kernel software receive timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME),
 * tracks loss / reordering / duplicates by sequence number in a sliding bitmap window (constant
 * memory at any rate and duration), records every inter-arrival gap above --gap-us, a per-ms arrival
 * histogram, a per-ms histogram of the packets received by their send time (vrgen's stamp; with
 * vrgen's sent_hist_ms it gives loss by send time) and one-way delay statistics (log-linear histogram, 0.1 % resolution), and optionally
 * logs every packet as little-endian (u64 seq, i64 t_ns) records.
 *
 * Per flow (source address and port, from recvmmsg's msg_name; up to CT_FLOWS_MAX sources in an
 * open-addressing table behind a one-entry cache, so runs of one source cost a compare): unique
 * packets, duplicates, reordering within the flow, first/last receive time and the longest silence.
 *
 * Live state (--state FILE): every --state-ms the packets so far, the packet with the highest send
 * stamp and the --after-file report, written atomically (FILE.tmp, rename) for a reader polling it.
 * --after-file FILE: once FILE holds a CLOCK_REALTIME ns threshold (e.g. when a migration
 * completed), the first received packet sent at or after it (lowest send stamp) and how many such
 * packets arrived; packets received before the threshold was read are found in a ring of the
 * recent ones ("complete": false if the ring no longer reached back to the threshold).
 *
 * Prints "READY" on stderr once bound; runs until SIGINT/SIGTERM or --duration; then drains what is
 * already queued and prints one sink.json object on stdout.
 */
#define _GNU_SOURCE
#include "common.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#define BATCH_MAX 1024
#define SLOT_BYTES 2048    /* > largest vrgen datagram (1472 B) */
#define GRO_SLOT_BYTES 65536 /* one UDP GRO aggregate */
#define CTRL_BYTES 128
#define WAIT_SLICE_US 50000     /* blocking receive wakes at least every 50 ms */
#define DRAIN_LIMIT_NS 500000000LL /* at stop, drain the queue for at most 0.5 s */
#define GAPS_MAX 1000000
#define AFTER_RING_LOG2 17 /* recent unique packets kept until the --after-file threshold is read */
#define FLOW_SLOTS 512     /* hash slots for CT_FLOWS_MAX sources: at most half full */

struct opts {
    int port;
    const char *bind;
    int v6;
    int64_t gap_ns;
    double duration_s;
    const char *log;
    int batch;
    int rcvbuf;
    int window_log2;
    double hist_max_s;
    int cpu;
    int busy;
    int no_gro;
    int seq_crt;
    const char *state;
    const char *after_file;
    int state_ms;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vrsink --port N [--bind ADDR] [-6] [--gap-us N] [--duration S] [--log FILE]\n"
            "              [--batch N] [--rcvbuf BYTES] [--window-log2 N] [--hist-max-s S] [--cpu N] [--busy]\n"
            "              [--no-gro] [--seq-crt] [--state FILE] [--state-ms N] [--after-file FILE]\n"
            "Receives vrgen UDP traffic; prints READY on stderr once bound, sink.json on stdout at exit\n"
            "(SIGINT/SIGTERM or --duration).\n"
            "  --bind ADDR      local address (family from it); default 0.0.0.0, or :: with -6\n"
            "  --gap-us N       record every inter-arrival gap longer than N us (default 1000)\n"
            "  --duration S     stop after S seconds (default 0 = until signal)\n"
            "  --log FILE       per-packet log: little-endian records (u64 seq, i64 t_ns) of every packet\n"
            "                   that carries a header (duplicates included), in arrival order\n"
            "  --batch N        max datagrams per recvmmsg (default 64, max %d)\n"
            "  --rcvbuf BYTES   socket receive buffer (default 67108864; SO_RCVBUFFORCE when permitted)\n"
            "  --window-log2 N  reorder/duplicate window = 2^N sequence numbers (default 24, 10..32)\n"
            "  --hist-max-s S   cap of the per-ms histogram span (default 7200)\n"
            "  --cpu N          pin to CPU N\n"
            "  --busy           busy-poll the socket instead of sleeping (burns a CPU; benchmarks only)\n"
            "  --no-gro         do not accept UDP GRO aggregates (the kernel then splits them, slower)\n"
            "  --seq-crt        payload bytes 0..7 carry seq mod 256,255,253,251,247,241,239,233 (one byte\n"
            "                   each, e.g. trafgen dinc() counters) instead of u64 seq + i64 send time;\n"
            "                   no one-way delay is computed\n"
            "  --state FILE     every --state-ms write the live state (one JSON object) to FILE atomically\n"
            "  --state-ms N     state period in ms, also how often --after-file is checked (default 10, 1..1000)\n"
            "  --after-file F   once F holds a CLOCK_REALTIME ns threshold: report the first packet sent at or\n"
            "                   after it and count those packets (\"after\" in the state and in sink.json)\n"
            "Timestamps: kernel software receive time (SO_TIMESTAMPNS, CLOCK_REALTIME ns).  Bad arguments: exit 2.\n",
            BATCH_MAX);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"port", required_argument, 0, 'p'},     {"bind", required_argument, 0, 'B'},
        {"gap-us", required_argument, 0, 'g'},   {"duration", required_argument, 0, 't'},
        {"log", required_argument, 0, 'L'},      {"batch", required_argument, 0, 'b'},
        {"rcvbuf", required_argument, 0, 'R'},   {"window-log2", required_argument, 0, 'w'},
        {"hist-max-s", required_argument, 0, 'H'}, {"help", no_argument, 0, 'h'},
        {"cpu", required_argument, 0, 'c'},      {"busy", no_argument, 0, 'y'},
        {"no-gro", no_argument, 0, 'n'},        {"seq-crt", no_argument, 0, 'C'},
        {"state", required_argument, 0, 'S'},    {"state-ms", required_argument, 0, 'm'},
        {"after-file", required_argument, 0, 'A'},
        {0, 0, 0, 0},
    };
    *o = (struct opts){.port = -1, .gap_ns = 1000000, .batch = 64, .rcvbuf = 64 << 20, .window_log2 = 24,
                       .hist_max_s = 7200, .cpu = -1, .state_ms = 10};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h6", lo, NULL)) != -1) {
        switch (c) {
        case 'p': o->port = (int)ct_parse_int("--port", optarg, 1, 65535); break;
        case 'B': o->bind = optarg; break;
        case '6': o->v6 = 1; break;
        case 'g': o->gap_ns = ct_parse_int("--gap-us", optarg, 1, 3600000000LL) * 1000; break;
        case 't': o->duration_s = ct_parse_double("--duration", optarg, 0, 1e7); break;
        case 'L': o->log = optarg; break;
        case 'b': o->batch = (int)ct_parse_int("--batch", optarg, 1, BATCH_MAX); break;
        case 'R': o->rcvbuf = (int)ct_parse_int("--rcvbuf", optarg, 4096, 1 << 30); break;
        case 'w': o->window_log2 = (int)ct_parse_int("--window-log2", optarg, 10, 32); break;
        case 'H': o->hist_max_s = ct_parse_double("--hist-max-s", optarg, 1, 86400 * 7); break;
        case 'c': o->cpu = (int)ct_parse_int("--cpu", optarg, 0, CPU_SETSIZE - 1); break;
        case 'y': o->busy = 1; break;
        case 'n': o->no_gro = 1; break;
        case 'C': o->seq_crt = 1; break;
        case 'S': o->state = optarg; break;
        case 'm': o->state_ms = (int)ct_parse_int("--state-ms", optarg, 1, 1000); break;
        case 'A': o->after_file = optarg; break;
        default: ct_other_opt(c, argv, usage);
        }
    }
    ct_no_operands(argc, argv);
    if (o->port < 0)
        ct_usage_error("--port N is required");
    if (o->seq_crt && o->after_file)
        ct_usage_error("--after-file needs send stamps: not with --seq-crt");
}

/* ---- sequence tracking: sliding bitmap over (max_seq - W, max_seq] ---- */
struct seqtrack {
    uint64_t *bits;
    uint64_t W, mask;
    int any;
    uint64_t min_seq, max_seq;
    uint64_t unique, dups, reordered, stale;
};

static inline int bit_test(const struct seqtrack *t, uint64_t s)
{
    uint64_t i = s & t->mask;
    return (int)((t->bits[i >> 6] >> (i & 63)) & 1);
}

static inline void bit_set(struct seqtrack *t, uint64_t s)
{
    uint64_t i = s & t->mask;
    t->bits[i >> 6] |= 1ULL << (i & 63);
}

/* Clear the bits of sequence numbers lo..hi (inclusive, hi - lo < W). */
static void bit_clear_range(struct seqtrack *t, uint64_t lo, uint64_t hi)
{
    uint64_t s = lo;
    while (s <= hi) {
        uint64_t i = s & t->mask;
        if ((i & 63) == 0 && hi - s >= 63) {
            t->bits[i >> 6] = 0;
            s += 64;
        } else {
            t->bits[i >> 6] &= ~(1ULL << (i & 63));
            s++;
        }
        if (s == 0)
            break; /* wrapped */
    }
}

/* Returns 1 for a new sequence number, 0 for a duplicate. */
static int seq_add(struct seqtrack *t, uint64_t s)
{
    if (!t->any) {
        t->any = 1;
        t->min_seq = t->max_seq = s;
        bit_set(t, s);
        t->unique++;
        return 1;
    }
    if (s > t->max_seq) {
        if (s - t->max_seq >= t->W)
            memset(t->bits, 0, (size_t)(t->W / 8));
        else
            bit_clear_range(t, t->max_seq + 1, s);
        bit_set(t, s);
        t->max_seq = s;
        t->unique++;
        return 1;
    }
    if (s < t->min_seq)
        t->min_seq = s;
    if (t->max_seq - s >= t->W) { /* older than the window: cannot tell, count as new but stale */
        t->stale++;
        t->unique++;
        return 1;
    }
    if (bit_test(t, s)) {
        t->dups++;
        return 0;
    }
    bit_set(t, s);
    t->reordered++;
    t->unique++;
    return 1;
}

/* ---- one-way delay: log-linear histogram, 1024 sub-buckets per power of two ---- */
#define OWD_SUB 1024
#define OWD_LINEAR (2 * OWD_SUB)
#define OWD_BUCKETS (OWD_LINEAR + 53 * OWD_SUB)

static inline int owd_index(uint64_t v)
{
    if (v < OWD_LINEAR)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* >= 11 */
    int shift = e - 10;
    return OWD_LINEAR + (e - 11) * OWD_SUB + (int)((v >> shift) - OWD_SUB);
}

/* Midpoint of bucket i in ns. */
static int64_t owd_value(int i)
{
    if (i < OWD_LINEAR)
        return i;
    int e = (i - OWD_LINEAR) / OWD_SUB + 11;
    int shift = e - 10;
    uint64_t m = (uint64_t)((i - OWD_LINEAR) % OWD_SUB + OWD_SUB);
    return (int64_t)((m << shift) + ((1ULL << shift) >> 1));
}

struct owd {
    uint64_t *h;
    uint64_t count, negative;
    int64_t min, max;
    long double sum;
};

static int64_t owd_quantile(const struct owd *o, double q)
{
    if (o->count == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)o->count);
    if (rank < 1)
        rank = 1;
    uint64_t cum = o->negative; /* negative values sort first, reported as the minimum */
    if (cum >= rank)
        return o->min;
    for (int i = 0; i < OWD_BUCKETS; i++) {
        cum += o->h[i];
        if (cum >= rank) {
            int64_t v = owd_value(i);
            if (v < o->min)
                v = o->min;
            if (v > o->max)
                v = o->max;
            return v;
        }
    }
    return o->max;
}


/* ---- --seq-crt: the sequence number as residues modulo pairwise coprime byte-sized moduli ----
 * Byte i of the payload is seq mod CRT_MOD[i]; a generator with only independent one-byte
 * counters (trafgen's dinc(0, m-1, 1)) can produce it.  The product of the moduli is ~2^63.6, so
 * the decoded number never wraps in practice.  Decoding is Garner's algorithm. */
#define CRT_N 8
#define CRT_BYTES CRT_N
static const uint32_t CRT_MOD[CRT_N] = {256, 255, 253, 251, 247, 241, 239, 233};
static uint32_t crt_inv[CRT_N]; /* inverse of CRT_MOD[0]*...*CRT_MOD[i-1] modulo CRT_MOD[i] */

static uint32_t inv_mod(uint64_t a, uint32_t m)
{
    a %= m;
    for (uint32_t x = 1; x < m; x++)
        if (a * x % m == 1)
            return x;
    return 0; /* not reached for coprime moduli */
}

static void crt_init(void)
{
    uint64_t prod = 1;
    for (int i = 0; i < CRT_N; i++) {
        crt_inv[i] = i ? inv_mod(prod, CRT_MOD[i]) : 0;
        prod *= CRT_MOD[i];
    }
}

/* Returns 0 and stores the number, or -1 if a residue is out of range (not a CRT payload). */
static int crt_decode(const unsigned char *p, uint64_t *out)
{
    uint64_t x = p[0], prod = CRT_MOD[0];
    for (int i = 1; i < CRT_N; i++) {
        uint32_t m = CRT_MOD[i], r = p[i];
        if (r >= m)
            return -1;
        uint32_t xm = (uint32_t)(x % m);
        uint32_t t = (uint32_t)((uint64_t)((r + m - xm) % m) * crt_inv[i] % m);
        x += (uint64_t)t * prod;
        prod *= m;
    }
    *out = x;
    return 0;
}

/* a send stamp further than this from the arrival time is not ours (foreign payload) */
#define TX_PLAUSIBLE_NS (60LL * 1000000000LL)

struct gap {
    int64_t t0, t1;
    uint64_t s0, s1;
};

/* ---- --after-file: the first packet sent at or after a threshold given while running ---- */
struct txrec {
    uint64_t seq;
    int64_t tx, rx;
};

struct after {
    const char *path;
    int known;            /* the threshold has been read */
    int64_t threshold_ns; /* CLOCK_REALTIME send stamp */
    int64_t read_ns;      /* when it was read */
    uint64_t packets;     /* unique packets sent at or after the threshold */
    int have_first, complete;
    struct txrec first;   /* the lowest send stamp among them */
    struct txrec *ring;   /* recent unique packets, until the threshold is known */
    size_t ring_n, ring_pos;
    uint64_t ring_used;
    int64_t evicted_max_rx; /* latest receive time pushed out of the ring */
};

static void after_count(struct after *a, uint64_t seq, int64_t tx, int64_t rx)
{
    a->packets++;
    if (!a->have_first || tx < a->first.tx) {
        a->have_first = 1;
        a->first = (struct txrec){seq, tx, rx};
    }
}

/* One unique packet with a plausible send stamp. */
static void after_add(struct after *a, uint64_t seq, int64_t tx, int64_t rx)
{
    if (!a->path)
        return;
    if (a->known) {
        if (tx >= a->threshold_ns)
            after_count(a, seq, tx, rx);
        return;
    }
    struct txrec *r = &a->ring[a->ring_pos];
    if (a->ring_used >= a->ring_n && r->rx > a->evicted_max_rx)
        a->evicted_max_rx = r->rx;
    *r = (struct txrec){seq, tx, rx};
    a->ring_pos = (a->ring_pos + 1) & (a->ring_n - 1);
    a->ring_used++;
}

/* Read the threshold if the file now holds one (a whole decimal number, optional newline); the
 * packets already received are taken from the ring.  A packet is received after it was sent (one
 * clock), so the count is complete if nothing received at or after the threshold left the ring. */
static void after_poll(struct after *a)
{
    if (!a->path || a->known)
        return;
    FILE *f = fopen(a->path, "re");
    if (!f)
        return;
    char buf[32];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf || (*end != '\0' && strcmp(end, "\n") != 0))
        return; /* not (yet) a threshold */
    a->known = 1;
    a->threshold_ns = v;
    a->read_ns = ct_now_ns(CLOCK_REALTIME);
    a->complete = a->evicted_max_rx < v;
    size_t used = a->ring_used < a->ring_n ? (size_t)a->ring_used : a->ring_n;
    for (size_t i = 0; i < used; i++)
        if (a->ring[i].tx >= v)
            after_count(a, a->ring[i].seq, a->ring[i].tx, a->ring[i].rx);
    free(a->ring);
    a->ring = NULL;
}

static void txrec_print(FILE *f, const struct txrec *r, int have)
{
    if (have)
        fprintf(f, "{\"seq\": %" PRIu64 ", \"tx_ns\": %" PRId64 ", \"rx_ns\": %" PRId64 "}", r->seq, r->tx, r->rx);
    else
        fputs("null", f);
}

/* The "after" member's value: null until a threshold was read. */
static void after_print(FILE *f, const struct after *a)
{
    if (!a->known) {
        fputs("null", f);
        return;
    }
    fprintf(f,
            "{\"threshold_ns\": %" PRId64 ", \"read_ns\": %" PRId64 ", \"packets\": %" PRIu64
            ", \"complete\": %s, \"first\": ",
            a->threshold_ns, a->read_ns, a->packets, a->complete ? "true" : "false");
    txrec_print(f, &a->first, a->have_first);
    fputc('}', f);
}

/* ---- per-flow accounting, keyed by the datagram's source address and port ---- */
struct flowkey {
    uint32_t w[5]; /* family << 16 | port (host order), then the address (IPv4: w[1], the rest 0) */
};

static inline int flowkey_eq(const struct flowkey *a, const struct flowkey *b)
{
    return ((a->w[0] ^ b->w[0]) | (a->w[1] ^ b->w[1]) | (a->w[2] ^ b->w[2]) | (a->w[3] ^ b->w[3]) |
            (a->w[4] ^ b->w[4])) == 0;
}

struct flow {
    struct flowkey key;
    uint64_t rx;                 /* receptions of packets with a header (duplicates included) */
    uint64_t packets, dups, reordered;
    uint64_t max_seq;            /* highest sequence number seen in this flow */
    int64_t first_ns, last_ns;   /* earliest and latest receive time */
    int64_t max_gap, max_gap_t0; /* longest interval between receptions, and the time before it */
};

struct flowtab {
    struct flow *f; /* CT_FLOWS_MAX */
    int n, last;    /* flows in use; index of the last one found (-1: none) */
    int16_t slot[FLOW_SLOTS]; /* flow index + 1, 0 = empty */
    uint64_t overflow;        /* packets of sources beyond CT_FLOWS_MAX */
};

/* The key of a source address (all zero for an address of another family or none). */
static inline void flowkey_of(const struct sockaddr_storage *sa, socklen_t len, struct flowkey *k)
{
    *k = (struct flowkey){{0}};
    if (sa->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *s4 = (const void *)sa;
        k->w[0] = (uint32_t)AF_INET << 16 | ntohs(s4->sin_port);
        k->w[1] = s4->sin_addr.s_addr;
    } else if (sa->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *s6 = (const void *)sa;
        k->w[0] = (uint32_t)AF_INET6 << 16 | ntohs(s6->sin6_port);
        memcpy(&k->w[1], &s6->sin6_addr, 16);
    }
}

/* The flow of key, added if new; NULL (counted in overflow) once CT_FLOWS_MAX sources are known. */
static struct flow *flow_get(struct flowtab *t, const struct flowkey *k)
{
    if (t->last >= 0 && flowkey_eq(&t->f[t->last].key, k))
        return &t->f[t->last];
    uint32_t h = 2166136261u; /* FNV-1a over the words */
    for (int i = 0; i < 5; i++)
        h = (h ^ k->w[i]) * 16777619u;
    h ^= h >> 15;
    for (uint32_t i = h & (FLOW_SLOTS - 1);; i = (i + 1) & (FLOW_SLOTS - 1)) {
        int s = t->slot[i];
        if (s == 0) {
            if (t->n == CT_FLOWS_MAX) {
                t->overflow++;
                return NULL;
            }
            t->f[t->n] = (struct flow){.key = *k};
            t->slot[i] = (int16_t)(t->n + 1);
            t->last = t->n++;
            return &t->f[t->last];
        }
        if (flowkey_eq(&t->f[s - 1].key, k)) {
            t->last = s - 1;
            return &t->f[s - 1];
        }
    }
}

/* One reception of a packet with sequence number seq at t; is_new from the global window. */
static void flow_add(struct flow *f, uint64_t seq, int is_new, int64_t t)
{
    if (f->rx == 0) {
        f->first_ns = f->last_ns = t;
        f->max_seq = seq;
    } else {
        if (t - f->last_ns > f->max_gap) { /* against the latest time so far, like the global gaps */
            f->max_gap = t - f->last_ns;
            f->max_gap_t0 = f->last_ns;
        }
        if (t < f->first_ns)
            f->first_ns = t;
        if (t > f->last_ns)
            f->last_ns = t;
    }
    if (is_new) {
        f->packets++;
        if (f->rx > 0 && seq < f->max_seq)
            f->reordered++;
    } else {
        f->dups++;
    }
    if (seq > f->max_seq)
        f->max_seq = seq;
    f->rx++;
}

static int flow_cmp(const void *a, const void *b)
{
    const struct flow *x = a, *y = b;
    uint32_t px = x->key.w[0] & 0xffff, py = y->key.w[0] & 0xffff;
    if (px != py)
        return px < py ? -1 : 1;
    return memcmp(x->key.w, y->key.w, sizeof x->key.w);
}

/* "flows": [...] sorted by source port (the table itself is sorted: called once, at the end). */
static void flows_print(FILE *f, struct flowtab *t)
{
    qsort(t->f, (size_t)t->n, sizeof *t->f, flow_cmp);
    t->last = -1;
    fputs("\"flows\": [", f);
    for (int i = 0; i < t->n; i++) {
        const struct flow *w = &t->f[i];
        char a[INET6_ADDRSTRLEN] = "?", src[INET6_ADDRSTRLEN + 16];
        int fam = (int)(w->key.w[0] >> 16);
        if (fam)
            inet_ntop(fam, &w->key.w[1], a, sizeof a);
        snprintf(src, sizeof src, fam == AF_INET6 ? "[%s]:%u" : "%s:%u", a, (unsigned)(w->key.w[0] & 0xffff));
        fprintf(f, "%s{\"src\": ", i ? ", " : "");
        ct_json_str(f, src);
        fprintf(f,
                ", \"packets\": %" PRIu64 ", \"duplicates\": %" PRIu64 ", \"reordered\": %" PRIu64
                ", \"first_ns\": %" PRId64 ", \"last_ns\": %" PRId64 ", \"max_gap_ns\": %" PRId64
                ", \"max_gap_t0_ns\": %" PRId64 "}",
                w->packets, w->dups, w->reordered, w->first_ns, w->last_ns, w->max_gap, w->max_gap_t0);
    }
    fprintf(f, "], \"flows_overflow\": %" PRIu64, t->overflow);
}

struct state {
    struct seqtrack seq;
    struct owd owd;
    struct ct_hist hist;    /* arrivals per ms of arrival time */
    struct ct_hist tx_hist; /* unique packets received per ms of their send time */
    struct gap *gaps;
    size_t n_gaps, gaps_cap;
    uint64_t gaps_dropped;
    int64_t gap_ns;
    int have_prev;
    int64_t prev_t; /* latest arrival time so far */
    uint64_t prev_seq;
    uint64_t received, bytes, malformed, truncated, user_ts, gro_segments;
    uint64_t frame_bytes_total; /* unique packets: UDP payload + the family's overhead */
    int overhead;               /* CT_V4_OVERHEAD or CT_V6_OVERHEAD */
    struct flowtab flows;
    int64_t first_ns, last_ns;
    uint32_t drops;
    int payload_min, payload_max;
    FILE *log;
    int seq_crt;
    struct after after;
    int have_max_tx;
    struct txrec max_tx; /* the received packet with the highest send stamp (of equal stamps, the last) */
    uint64_t state_writes, state_errors;
};

static void on_packet(struct state *st, const unsigned char *p, int len, int64_t t, const struct flowkey *src)
{
    st->received++;
    uint64_t seq;
    int64_t tx = 0;
    if (st->seq_crt) {
        if (len < CRT_BYTES || crt_decode(p, &seq) != 0) {
            st->malformed++;
            return;
        }
    } else {
        if (len < CT_HDR_BYTES) {
            st->malformed++;
            return;
        }
        seq = ct_get_le64(p);
        tx = (int64_t)ct_get_le64(p + 8);
    }
    if (st->log) {
        unsigned char rec[16];
        ct_put_le64(rec, seq);
        ct_put_le64(rec + 8, (uint64_t)t);
        if (fwrite_unlocked(rec, 16, 1, st->log) != 1)
            ct_die("--log: write failed: %s", strerror(errno));
    }
    if (st->received - st->malformed == 1) {
        st->first_ns = st->last_ns = t;
        st->payload_min = st->payload_max = len;
    }
    if (t < st->first_ns)
        st->first_ns = t;
    if (t > st->last_ns)
        st->last_ns = t;
    if (len < st->payload_min)
        st->payload_min = len;
    if (len > st->payload_max)
        st->payload_max = len;

    int is_new = seq_add(&st->seq, seq);
    struct flow *fl = flow_get(&st->flows, src);
    if (fl)
        flow_add(fl, seq, is_new, t);
    if (is_new) {
        st->bytes += (uint64_t)len;
        st->frame_bytes_total += (uint64_t)(len + st->overhead);
        if (!st->seq_crt) { /* --seq-crt payloads carry no send time */
            int64_t d = (int64_t)((uint64_t)t - (uint64_t)tx); /* wraps instead of UB on foreign payloads */
            struct owd *o = &st->owd;
            if (o->count == 0 || d < o->min)
                o->min = d;
            if (o->count == 0 || d > o->max)
                o->max = d;
            o->count++;
            o->sum += d;
            if (d < 0)
                o->negative++;
            else
                o->h[owd_index((uint64_t)d)]++;
            if (d > -TX_PLAUSIBLE_NS && d < TX_PLAUSIBLE_NS) { /* a send stamp of this clock */
                ct_hist_add(&st->tx_hist, ct_ms_floor(tx), 1);
                /* >=: the packets of one vrgen send call share its stamp; the later one wins */
                if (!st->have_max_tx || tx >= st->max_tx.tx) {
                    st->have_max_tx = 1;
                    st->max_tx = (struct txrec){seq, tx, t};
                }
                after_add(&st->after, seq, tx, t);
            }
        }
    }

    if (st->have_prev) {
        if (t - st->prev_t > st->gap_ns) {
            if (st->n_gaps == st->gaps_cap && st->gaps_cap < GAPS_MAX) {
                size_t nc = st->gaps_cap ? st->gaps_cap * 2 : 1024;
                if (nc > GAPS_MAX)
                    nc = GAPS_MAX;
                struct gap *ng = realloc(st->gaps, nc * sizeof *ng);
                if (!ng)
                    ct_die("out of memory");
                st->gaps = ng;
                st->gaps_cap = nc;
            }
            if (st->n_gaps < st->gaps_cap)
                st->gaps[st->n_gaps++] = (struct gap){st->prev_t, t, st->prev_seq, seq};
            else
                st->gaps_dropped++;
        }
        if (t > st->prev_t) {
            st->prev_t = t;
            st->prev_seq = seq;
        }
    } else {
        st->have_prev = 1;
        st->prev_t = t;
        st->prev_seq = seq;
    }
    ct_hist_add(&st->hist, ct_ms_floor(t), 1);
}

/* --state: write the live state to a temporary file and rename it over FILE. */
static void state_write(struct state *st, const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        st->state_errors++;
        return;
    }
    FILE *f = fopen(tmp, "we");
    if (!f) {
        st->state_errors++;
        return;
    }
    fprintf(f, "{\"t_ns\": %" PRId64 ", \"packets\": %" PRIu64 ", \"received\": %" PRIu64 ", \"last_rx_ns\": %" PRId64
            ", \"max_tx\": ",
            ct_now_ns(CLOCK_REALTIME), st->seq.unique, st->received, st->received > st->malformed ? st->last_ns : 0);
    txrec_print(f, &st->max_tx, st->have_max_tx);
    fputs(", \"after\": ", f);
    after_print(f, &st->after);
    fputs("}\n", f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        st->state_errors++;
        unlink(tmp);
        return;
    }
    st->state_writes++;
}

static void print_json(struct state *st, const struct opts *o, int fam, const char *bind, int rcvbuf,
                       int64_t start_ns, int64_t end_ns, const char *stopped_by)
{
    FILE *f = stdout;
    const struct seqtrack *s = &st->seq;
    uint64_t span = s->any ? s->max_seq - s->min_seq + 1 : 0;
    uint64_t lost = span > s->unique ? span - s->unique : 0;
    int overhead = fam == AF_INET6 ? CT_V6_OVERHEAD : CT_V4_OVERHEAD;
    uint64_t valid = st->received - st->malformed;
    fprintf(f, "{\"tool\": \"vrsink\", \"version\": 1, \"clock\": \"CLOCK_REALTIME\", \"timestamps\": \"%s\", ",
            st->user_ts ? "user" : "kernel");
    fprintf(f,
            "\"packets\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"frame_bytes\": %d, \"first_seq\": %" PRIu64
            ", \"last_seq\": %" PRIu64 ", \"lost\": %" PRIu64 ", \"reordered\": %" PRIu64 ", \"duplicates\": %" PRIu64
            ", ",
            s->unique, st->bytes, valid ? st->payload_min + overhead : 0, s->any ? s->min_seq : 0,
            s->any ? s->max_seq : 0, lost, s->reordered, s->dups);
    fprintf(f, "\"first_ns\": %" PRId64 ", \"last_ns\": %" PRId64 ", \"gap_threshold_ns\": %" PRId64 ", \"gaps\": [",
            valid ? st->first_ns : 0, valid ? st->last_ns : 0, st->gap_ns);
    for (size_t i = 0; i < st->n_gaps; i++) {
        const struct gap *g = &st->gaps[i];
        fprintf(f, "%s[%" PRId64 ", %" PRId64 ", %" PRIu64 ", %" PRIu64 "]", i ? ", " : "", g->t0, g->t1, g->s0,
                g->s1);
    }
    fputs("], ", f);
    ct_hist_print(f, &st->hist, "hist");
    fputs(", ", f);
    ct_hist_print(f, &st->tx_hist, "tx_hist");
    const struct owd *w = &st->owd;
    fprintf(f,
            ", \"owd_ns\": {\"min\": %" PRId64 ", \"median\": %" PRId64 ", \"max\": %" PRId64 ", \"p99\": %" PRId64
            ", \"p999\": %" PRId64 ", \"mean\": %.0f, \"count\": %" PRIu64 ", \"negative\": %" PRIu64 "}, ",
            w->count ? w->min : 0, owd_quantile(w, 0.5), w->count ? w->max : 0, owd_quantile(w, 0.99),
            owd_quantile(w, 0.999), w->count ? (double)(w->sum / w->count) : 0.0, w->count, w->negative);
    double dur = valid > 1 && st->last_ns > st->first_ns ? (double)(st->last_ns - st->first_ns) / 1e9 : 0;
    fprintf(f,
            "\"received\": %" PRIu64 ", \"stale\": %" PRIu64 ", \"malformed\": %" PRIu64 ", \"truncated\": %" PRIu64
            ", \"user_timestamps\": %" PRIu64 ", \"gro_segments\": %" PRIu64 ", \"socket_drops\": %u, \"payload_bytes_min\": %d, "
            "\"payload_bytes_max\": %d, \"rx_pps\": %.3f, \"gaps_dropped\": %" PRIu64 ", \"hist_dropped\": %" PRIu64
            ", \"tx_hist_dropped\": %" PRIu64 ", ",
            st->received, s->stale, st->malformed, st->truncated, st->user_ts, st->gro_segments, st->drops,
            valid ? st->payload_min : 0, valid ? st->payload_max : 0, dur > 0 ? (double)(s->unique - 1) / dur : 0.0,
            st->gaps_dropped, st->hist.dropped, st->tx_hist.dropped);
    fprintf(f, "\"seq_format\": \"%s\", \"frame_bytes_total\": %" PRIu64 ", ", st->seq_crt ? "crt8" : "le64+send_ns",
            st->frame_bytes_total);
    flows_print(f, &st->flows);
    fputs(", ", f);
    fputs("\"max_tx\": ", f);
    txrec_print(f, &st->max_tx, st->have_max_tx);
    fputs(", \"after\": ", f);
    after_print(f, &st->after);
    fprintf(f, ", \"state_writes\": %" PRIu64 ", \"state_errors\": %" PRIu64 ", ", st->state_writes, st->state_errors);
    fprintf(f, "\"family\": %d, \"bind\": ", fam == AF_INET6 ? 6 : 4);
    ct_json_str(f, bind);
    fprintf(f,
            ", \"port\": %d, \"rcvbuf_bytes\": %d, \"window\": %" PRIu64 ", \"start_ns\": %" PRId64
            ", \"end_ns\": %" PRId64 ", \"stopped_by\": \"%s\", ",
            o->port, rcvbuf, s->W, start_ns, end_ns, stopped_by);
    double cpu_user, cpu_sys;
    ct_cpu_times(&cpu_user, &cpu_sys);
    fprintf(f, "\"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f}\n", cpu_user, cpu_sys);
    fflush(f);
}

int main(int argc, char **argv)
{
    ct_prog = "vrsink";
    struct opts o;
    parse_args(argc, argv, &o);

    struct sockaddr_storage addr;
    socklen_t alen;
    const char *bind_str = o.bind ? o.bind : (o.v6 ? "::" : "0.0.0.0");
    int fam = ct_parse_addr("--bind", bind_str, o.port, &addr, &alen);
    if (o.v6 && fam != AF_INET6)
        ct_usage_error("-6 given but --bind %s is an IPv4 address", bind_str);

    if (o.cpu >= 0)
        ct_pin_cpu(o.cpu);

    ct_catch_stop_signals(); /* no SA_RESTART: blocking receive returns EINTR */

    struct state st = {.gap_ns = o.gap_ns, .seq_crt = o.seq_crt,
                       .overhead = fam == AF_INET6 ? CT_V6_OVERHEAD : CT_V4_OVERHEAD, .flows = {.last = -1}};
    st.flows.f = calloc(CT_FLOWS_MAX, sizeof *st.flows.f);
    crt_init();
    st.seq.W = 1ULL << o.window_log2;
    st.seq.mask = st.seq.W - 1;
    st.seq.bits = calloc((size_t)(st.seq.W / 64), sizeof(uint64_t));
    st.owd.h = calloc(OWD_BUCKETS, sizeof(uint64_t));
    st.hist.max_len = st.tx_hist.max_len = (size_t)(o.hist_max_s * 1000);
    const size_t slot_bytes = o.no_gro ? SLOT_BYTES : GRO_SLOT_BYTES;
    unsigned char *slots = malloc((size_t)o.batch * slot_bytes);
    unsigned char *ctrl = malloc((size_t)o.batch * CTRL_BYTES);
    struct mmsghdr *msgs = calloc((size_t)o.batch, sizeof *msgs);
    struct iovec *iov = calloc((size_t)o.batch, sizeof *iov);
    struct sockaddr_storage *names = calloc((size_t)o.batch, sizeof *names);
    if (o.after_file) {
        st.after = (struct after){.path = o.after_file, .ring_n = (size_t)1 << AFTER_RING_LOG2,
                                  .evicted_max_rx = INT64_MIN};
        st.after.ring = calloc(st.after.ring_n, sizeof *st.after.ring);
        if (!st.after.ring)
            ct_die("out of memory");
    }
    if (!st.seq.bits || !st.owd.h || !slots || !ctrl || !msgs || !iov || !names || !st.flows.f)
        ct_die("out of memory");

    if (o.log) {
        st.log = fopen(o.log, "wb");
        if (!st.log)
            ct_usage_error("--log %s: %s", o.log, strerror(errno));
        setvbuf(st.log, NULL, _IOFBF, 4 << 20);
    }

    int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0)
        ct_die("socket: %s", strerror(errno));
    int one = 1;
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &o.rcvbuf, sizeof o.rcvbuf) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf, sizeof o.rcvbuf);
    int kernel_ts = setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0;
    int gro = !o.no_gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
    const int ticking = o.state || o.after_file;
    const int64_t tick_ns = (int64_t)o.state_ms * 1000000;
    struct timeval tv = {.tv_sec = 0, .tv_usec = ticking && o.state_ms * 1000 < WAIT_SLICE_US ? o.state_ms * 1000
                                                                                             : WAIT_SLICE_US};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&addr, alen) != 0)
        ct_die("bind %s port %d: %s", bind_str, o.port, strerror(errno));
    int rcvbuf = 0;
    socklen_t sl = sizeof rcvbuf;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl);

    setvbuf(stdout, NULL, _IOFBF, 1 << 20);
    int64_t start_ns = ct_now_ns(CLOCK_REALTIME);
    int64_t deadline = o.duration_s > 0 ? ct_now_ns(CLOCK_MONOTONIC) + (int64_t)llround(o.duration_s * 1e9)
                                        : INT64_MAX;
    fprintf(stderr, "READY\n");
    fflush(stderr);

    const char *stopped_by = "signal";
    int draining = 0, reinit = o.batch;
    int64_t drain_until = 0, next_tick = 0;
    for (;;) {
        if (ticking) {
            int64_t now = ct_now_ns(CLOCK_MONOTONIC);
            if (now >= next_tick) {
                after_poll(&st.after);
                if (o.state)
                    state_write(&st, o.state);
                next_tick = now + tick_ns;
            }
        }
        if (!draining) {
            if (ct_stop || ct_now_ns(CLOCK_MONOTONIC) >= deadline) {
                if (!ct_stop)
                    stopped_by = "duration";
                draining = 1;
                drain_until = ct_now_ns(CLOCK_MONOTONIC) + DRAIN_LIMIT_NS;
            }
        } else if (ct_now_ns(CLOCK_MONOTONIC) >= drain_until) {
            break;
        }
        for (int i = 0; i < reinit; i++) { /* only the headers the kernel wrote last time */
            iov[i].iov_base = slots + (size_t)i * slot_bytes;
            iov[i].iov_len = slot_bytes;
            msgs[i].msg_hdr = (struct msghdr){.msg_name = &names[i], .msg_namelen = sizeof names[i],
                                              .msg_iov = &iov[i], .msg_iovlen = 1,
                                              .msg_control = ctrl + (size_t)i * CTRL_BYTES,
                                              .msg_controllen = CTRL_BYTES};
        }
        int n = recvmmsg(fd, msgs, (unsigned)o.batch, draining || o.busy ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        reinit = n > 0 ? n : 0;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (draining)
                    break;
                continue;
            }
            if (errno == EINTR)
                continue;
            ct_die("recvmmsg: %s", strerror(errno));
        }
        int64_t user_t = 0;
        for (int i = 0; i < n; i++) {
            struct msghdr *m = &msgs[i].msg_hdr;
            int64_t t = -1;
            int seg = 0;
            if (m->msg_flags & MSG_TRUNC)
                st.truncated++;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    t = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                } else if (gro && c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                    memcpy(&seg, CMSG_DATA(c), sizeof seg);
                }
            }
            if (t <= 0 || !kernel_ts) {
                if (user_t == 0)
                    user_t = ct_now_ns(CLOCK_REALTIME);
                t = user_t;
                st.user_ts++;
            }
            const unsigned char *p = iov[i].iov_base;
            int len = (int)msgs[i].msg_len;
            struct flowkey src;
            flowkey_of(&names[i], m->msg_namelen, &src);
            if (seg > 0 && len > seg) { /* a GRO aggregate: equal segments, the last may be shorter */
                for (int off = 0; off < len; off += seg) {
                    on_packet(&st, p + off, len - off < seg ? len - off : seg, t, &src);
                    st.gro_segments++;
                }
            } else {
                on_packet(&st, p, len, t, &src);
            }
        }
    }
    uint32_t mem[SK_MEMINFO_VARS] = {0};
    socklen_t ml = sizeof mem;
    if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &ml) == 0 && ml > SK_MEMINFO_DROPS * sizeof(uint32_t))
        st.drops = mem[SK_MEMINFO_DROPS];
    int64_t end_ns = ct_now_ns(CLOCK_REALTIME);
    close(fd);
    if (st.log && fclose(st.log) != 0)
        ct_die("--log %s: %s", o.log, strerror(errno));
    after_poll(&st.after);
    if (o.state)
        state_write(&st, o.state);
    print_json(&st, &o, fam, bind_str, rcvbuf, start_ns, end_ns, stopped_by);
    free(st.seq.bits);
    free(st.owd.h);
    free(st.gaps);
    free(st.hist.c);
    free(st.tx_hist.c);
    free(st.after.ring);
    free(slots);
    free(ctrl);
    free(msgs);
    free(iov);
    free(names);
    free(st.flows.f);
    return 0;
}
