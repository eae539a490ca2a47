/* vrgen: constant-bit-rate UDP generator for vrmig.
 *
 * Rate convention: Ethernet-frame bits, frame_bytes*8 per packet, where the frame includes the
 * 14 B Ethernet header and the 4 B FCS (not preamble / inter-frame gap).  UDP payload is
 * frame - 46 (IPv4) or frame - 66 (IPv6).  Each payload starts with u64 sequence number and i64
 * CLOCK_REALTIME send time in ns (little endian).
 *
 * Frame sizes: one (--frame) or a mix (--sizes S:W,...): the size of packet k is entry cyc[k mod C]
 * of a fixed cycle of C = sum(W) packets in which each size appears W times, interleaved by smooth
 * weighted round-robin (see build_cycle).
 *
 * Pacing: packet k is due at t0 + bits(k) / rate on CLOCK_MONOTONIC, bits(k) the frame bits of
 * packets 0..k-1 (with one size k * frame_bits; absolute schedule, no drift: whole cycles times
 * the cycle's bits plus a prefix sum within the cycle, in integers).  No packet is sent before it
 * is due.  The generator sends in bursts: it sleeps with
 * clock_nanosleep(TIMER_ABSTIME) (optionally spinning the last --spin-us) until the last packet of
 * the next burst is due -- a burst is the packets due within --quantum-us, at most --batch -- and
 * then sends every packet due by then with sendmmsg() (calls of at most --batch packets).  A
 * wakeup costs far more CPU than sending a packet (a context switch; 12-18 us of CPU on a nested
 * VM), so the quantum trades CPU for schedule deviation, which is recorded per packet: send stamp
 * minus due time (sched_dev_ns).  When behind (CPU contention) it catches up at once, in calls of
 * --batch, keeping the schedule.
 *
 * Flows (--flows M): M connected UDP sockets, each with its own ephemeral source port; one global
 * sequence number, packet k goes out on socket (k / R) % M (R = --flow-run).  A burst is then one
 * sendmmsg() call per run of R, made in sequence order, so the split alone reorders nothing.
 *
 * Send stamps: every packet of a sendmmsg() call carries the CLOCK_REALTIME time read just before
 * the call; a packet leaves at most the call's duration later (send_call_ns).
 *
 * At exit (duration reached, SIGINT or SIGTERM) prints one gen.json object on stdout, with the
 * packets sent per ms of their send stamp (sent_hist_ms; vrsink counts the same stamps received).
 */
#define _GNU_SOURCE
#include "common.h"
#include "pktframe.h"

#include <getopt.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#define BATCH_MAX 1024
#define SLEEP_CHUNK_NS 100000000LL /* wake at least every 100 ms to notice signals */
#define LATE_EVENTS_MAX 100000
#define GSO_SEGS 64     /* UDP_MAX_SEGMENTS of older kernels */
#define GSO_BYTES 65000 /* stay below the 64 KiB IP datagram limit */
#define SENT_HIST_MAX_S 7200 /* span of sent_hist_ms (per-ms send counts) */
#define QUANTUM_US_DEFAULT 500 /* burst span: see --quantum-us */
#define FLOW_RUN_DEFAULT 8     /* --flow-run: consecutive sequence numbers per socket */
#define SIZES_MAX 16           /* --sizes entries */
#define CYCLE_MAX 4096         /* sum of the --sizes weights: packets per size cycle */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

struct opts {
    const char *dst;
    int port;
    uint64_t rate_bps;
    int frame;  /* with --sizes the smallest size */
    int have_frame; /* --frame given */
    int have_sizes; /* --sizes given */
    int nsizes;     /* --sizes entries (without --sizes: 1, the frame) */
    int size[SIZES_MAX], weight[SIZES_MAX];
    int flows, flow_run;
    double duration_s;
    int cpu;
    int batch;
    int spin_us;
    int quantum_us;
    int late_us;
    int sndbuf;
    int gso;
    int fifo;
    const char *pkt_dev;
    const char *dst_mac;
};

struct late_event {
    uint64_t seq;
    int64_t sched_ns, sent_ns;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vrgen --dst ADDR --port N --rate BPS [--frame BYTES | --sizes S:W[,S:W...]] [--duration S]\n"
            "             [--cpu N] [--flows M] [--flow-run R] [--batch N] [--spin-us N] [--quantum-us N]\n"
            "             [--late-us N] [--sndbuf BYTES] [--fifo PRIO] [--gso] [--packet IFNAME --dst-mac MAC]\n"
            "Constant-bit-rate UDP over IPv4 or IPv6 (family from --dst).\n"
            "  --rate BPS      bits/s, suffix k/M/G (x1000); 0 = unpaced maximum\n"
            "                  rate convention: " CT_RATE_CONVENTION "\n"
            "  --frame BYTES   Ethernet frame size %d..%d (default 64); UDP payload = frame-46 (IPv4),\n"
            "                  frame-66 (IPv6); payload starts with u64 seq + i64 CLOCK_REALTIME ns (LE)\n"
            "  --sizes S:W,... a mix of frame sizes (same convention and range as --frame, at most %d) with\n"
            "                  positive integer weights W (sum at most %d), e.g. 64:7,570:4,1518:1 (simple\n"
            "                  IMIX): a fixed cycle of sum(W) packets, each size W times, interleaved; packet k\n"
            "                  is due when the frame bits of packets 0..k-1 are sent at the rate.  Not with\n"
            "                  --frame or --packet; with --gso only one size.  gen.json frame_bytes is then\n"
            "                  the smallest size (mean_frame_bytes the cycle's mean)\n"
            "  --flows M       M UDP sockets (1..%d, default 1), each from its own source port, one\n"
            "                  sequence number over all; not with --packet or --gso\n"
            "  --flow-run R    packets k with the same k/R go to socket (k/R) mod M (1..%d, default %d)\n"
            "  --duration S    seconds to send (default 10; 0 = until SIGINT/SIGTERM)\n"
            "  --cpu N         pin to CPU N\n"
            "  --batch N       max packets per sendmmsg and per burst (default 64, max %d)\n"
            "  --spin-us N     busy-wait the last N us before a due time instead of sleeping (default 0)\n"
            "  --quantum-us N  send in bursts: sleep until the packets due within N us are due, then send\n"
            "                  them (default %d; 0 = wake per packet); the first packet of a burst\n"
            "                  waits up to N us (gen.json sched_dev_ns), each wakeup costs CPU\n"
            "  --late-us N     record a late event when the generator was silent for > N us while packets\n"
            "                  were due for > N us (default 1000)\n"
            "  --sndbuf BYTES  socket send buffer (default 4194304, SO_SNDBUFFORCE when permitted)\n"
            "  --fifo PRIO     run with SCHED_FIFO priority PRIO (1..99): immune to ordinary CPU contention\n"
            "  --gso           UDP segmentation offload: the kernel splits one buffer into up to %d\n"
            "                  datagrams (faster; interfaces before the segmentation point count one\n"
            "                  packet per buffer, so NOT for counter-based measurements)\n"
            "  --packet IFNAME send whole Ethernet frames through an AF_PACKET socket on IFNAME with\n"
            "                  PACKET_QDISC_BYPASS (prebuilt IP/UDP headers and checksums; one packet per\n"
            "                  frame on every interface; bypasses routing, neighbour resolution and qdiscs:\n"
            "                  IFNAME must be the route's interface, needs CAP_NET_RAW)\n"
            "  --dst-mac MAC   next-hop MAC address for --packet\n"
            "Prints gen.json on stdout at exit.  Bad arguments: exit 2.\n",
            CT_FRAME_MIN, CT_FRAME_MAX, SIZES_MAX, CYCLE_MAX, CT_FLOWS_MAX, BATCH_MAX, FLOW_RUN_DEFAULT, BATCH_MAX,
            QUANTUM_US_DEFAULT, GSO_SEGS);
}

/* --sizes S:W[,S:W...]: sizes within CT_FRAME_MIN..CT_FRAME_MAX (the family's minimum is checked
 * once --dst is known), positive integer weights adding up to at most CYCLE_MAX. */
static void parse_sizes(const char *arg, struct opts *o)
{
    const char *s = arg;
    long total = 0;
    o->nsizes = 0;
    for (;;) {
        char *end;
        errno = 0;
        long sz = strtol(s, &end, 10);
        if (errno || end == s || *end != ':')
            ct_usage_error("--sizes: '%s' is not a list of SIZE:WEIGHT (e.g. 64:7,570:4,1518:1)", arg);
        s = end + 1;
        errno = 0;
        long w = strtol(s, &end, 10);
        if (errno || end == s || (*end != ',' && *end != '\0'))
            ct_usage_error("--sizes: '%s' is not a list of SIZE:WEIGHT (e.g. 64:7,570:4,1518:1)", arg);
        if (o->nsizes == SIZES_MAX)
            ct_usage_error("--sizes: more than %d entries", SIZES_MAX);
        if (sz < CT_FRAME_MIN || sz > CT_FRAME_MAX)
            ct_usage_error("--sizes: size %ld out of range %d..%d", sz, CT_FRAME_MIN, CT_FRAME_MAX);
        if (w < 1 || w > CYCLE_MAX)
            ct_usage_error("--sizes: weight %ld of size %ld out of range 1..%d", w, sz, CYCLE_MAX);
        total += w;
        if (total > CYCLE_MAX)
            ct_usage_error("--sizes: the weights add up to more than %d", CYCLE_MAX);
        o->size[o->nsizes] = (int)sz;
        o->weight[o->nsizes] = (int)w;
        o->nsizes++;
        if (*end == '\0')
            break;
        s = end + 1;
    }
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"dst", required_argument, 0, 'd'},      {"port", required_argument, 0, 'p'},
        {"rate", required_argument, 0, 'r'},     {"frame", required_argument, 0, 'f'},
        {"duration", required_argument, 0, 't'}, {"cpu", required_argument, 0, 'c'},
        {"batch", required_argument, 0, 'b'},    {"spin-us", required_argument, 0, 's'},
        {"quantum-us", required_argument, 0, 'q'}, {"late-us", required_argument, 0, 'l'},
        {"sndbuf", required_argument, 0, 'S'},   {"help", no_argument, 0, 'h'},
        {"gso", no_argument, 0, 'G'},        {"fifo", required_argument, 0, 'F'},
        {"packet", required_argument, 0, 'P'}, {"dst-mac", required_argument, 0, 'M'},
        {"sizes", required_argument, 0, 'z'},  {"flows", required_argument, 0, 'm'},
        {"flow-run", required_argument, 0, 'R'},
        {0, 0, 0, 0},
    };
    int have_rate = 0;
    *o = (struct opts){.port = -1, .frame = 64, .duration_s = 10, .cpu = -1, .batch = 64, .spin_us = 0,
                       .quantum_us = QUANTUM_US_DEFAULT, .late_us = 1000, .sndbuf = 4 << 20, .flows = 1,
                       .flow_run = FLOW_RUN_DEFAULT};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'd': o->dst = optarg; break;
        case 'p': o->port = (int)ct_parse_int("--port", optarg, 1, 65535); break;
        case 'r': o->rate_bps = ct_parse_rate("--rate", optarg); have_rate = 1; break;
        case 'f':
            o->frame = (int)ct_parse_int("--frame", optarg, CT_FRAME_MIN, CT_FRAME_MAX);
            o->have_frame = 1;
            break;
        case 'z': parse_sizes(optarg, o), o->have_sizes = 1; break;
        case 'm': o->flows = (int)ct_parse_int("--flows", optarg, 1, CT_FLOWS_MAX); break;
        case 'R': o->flow_run = (int)ct_parse_int("--flow-run", optarg, 1, BATCH_MAX); break;
        case 't': o->duration_s = ct_parse_double("--duration", optarg, 0, 1e7); break;
        case 'c': o->cpu = (int)ct_parse_int("--cpu", optarg, 0, CPU_SETSIZE - 1); break;
        case 'b': o->batch = (int)ct_parse_int("--batch", optarg, 1, BATCH_MAX); break;
        case 's': o->spin_us = (int)ct_parse_int("--spin-us", optarg, 0, 1000000); break;
        case 'q': o->quantum_us = (int)ct_parse_int("--quantum-us", optarg, 0, 1000000); break;
        case 'l': o->late_us = (int)ct_parse_int("--late-us", optarg, 1, 100000000); break;
        case 'S': o->sndbuf = (int)ct_parse_int("--sndbuf", optarg, 4096, 1 << 30); break;
        case 'G': o->gso = 1; break;
        case 'F': o->fifo = (int)ct_parse_int("--fifo", optarg, 1, 99); break;
        case 'P': o->pkt_dev = optarg; break;
        case 'M': o->dst_mac = optarg; break;
        default: ct_other_opt(c, argv, usage);
        }
    }
    ct_no_operands(argc, argv);
    if (!o->dst)
        ct_usage_error("--dst ADDR is required");
    if (o->port < 0)
        ct_usage_error("--port N is required");
    if (!have_rate)
        ct_usage_error("--rate BPS is required (0 = unpaced maximum)");
    if (!o->pkt_dev != !o->dst_mac)
        ct_usage_error("--packet IFNAME and --dst-mac MAC go together");
    if (o->pkt_dev && o->gso)
        ct_usage_error("--gso does not apply to --packet (one frame per packet)");
    if (o->flows > 1 && o->pkt_dev)
        ct_usage_error("--flows %d does not apply to --packet (its frames carry one source port)", o->flows);
    if (o->flows > 1 && o->gso)
        ct_usage_error("--flows %d does not work with --gso (one GSO buffer goes out on one socket)", o->flows);
    if (o->have_sizes && o->have_frame)
        ct_usage_error("--sizes and --frame exclude each other (one size: --frame S or --sizes S:1)");
    if (o->have_sizes && o->pkt_dev)
        ct_usage_error("--sizes does not apply to --packet (its frames are prebuilt for one size: use --frame)");
    if (!o->have_sizes) {
        o->nsizes = 1;
        o->size[0] = o->frame;
        o->weight[0] = 1;
    } else {
        o->frame = o->size[0];
        for (int i = 1; i < o->nsizes; i++) {
            if (o->size[i] < o->frame)
                o->frame = o->size[i];
            if (o->gso && o->size[i] != o->size[0])
                ct_usage_error("--gso needs one frame size (the kernel cuts equal segments): not a --sizes mix");
        }
    }
}

/* The size cycle: C = sum(W) packets, cyc_frame[j] the frame bytes of position j, cyc_bits[j] the
 * frame bits of positions 0..j-1 (cyc_bits[C] the cycle's bits).  The order is smooth weighted
 * round-robin (nginx's upstream balancer): at each step every size's current value grows by its
 * weight, the largest current value (the first of equal ones) is picked and lowered by the total
 * weight.  Each size appears exactly W times per cycle, spread over it (7:4:1 gives
 * a b a a b a c a b a b a, not seven a in a row), so a short stretch of packets carries about the
 * mix and the schedule never bunches one size. */
struct cycle {
    int n;
    int frame[CYCLE_MAX];
    uint64_t bits[CYCLE_MAX + 1];
};

static void build_cycle(const struct opts *o, struct cycle *c)
{
    long cur[SIZES_MAX] = {0}, total = 0;
    for (int i = 0; i < o->nsizes; i++)
        total += o->weight[i];
    c->n = (int)total;
    c->bits[0] = 0;
    for (int j = 0; j < c->n; j++) {
        int best = 0;
        for (int i = 0; i < o->nsizes; i++) {
            cur[i] += o->weight[i];
            if (cur[i] > cur[best])
                best = i;
        }
        cur[best] -= total;
        c->frame[j] = o->size[best];
        c->bits[j + 1] = c->bits[j] + (uint64_t)o->size[best] * 8;
    }
}

/* Absolute schedule: due time of packet k relative to t0, in ns (exact integer arithmetic):
 * sched_bits(k) * 1e9 / rate, sched_bits(k) the frame bits of packets 0..k-1. */
struct sched {
    uint64_t n;           /* packets per size cycle */
    uint64_t cycle_bits;  /* frame bits per cycle */
    const uint64_t *bits; /* n + 1 prefix sums: frame bits of cycle positions 0..j-1 */
    uint64_t rate;
};

static inline unsigned __int128 sched_bits(const struct sched *s, uint64_t k)
{
    if (s->n == 1)
        return (unsigned __int128)k * s->cycle_bits;
    return (unsigned __int128)(k / s->n) * s->cycle_bits + s->bits[k % s->n];
}

static inline int64_t sched_off(const struct sched *s, uint64_t k)
{
    return (int64_t)(sched_bits(s, k) * 1000000000u / s->rate);
}

/* Number of packets due at offset off (>= 0): those k with sched_bits(k) * 1e9 <= off * rate
 * (rounds down by less than one ns against sched_off(k) <= off; the burst logic allows for it). */
static inline uint64_t sched_due(const struct sched *s, int64_t off)
{
    if (off < 0)
        return 0;
    unsigned __int128 x = (unsigned __int128)off * s->rate / 1000000000u; /* the largest bits(k) due */
    uint64_t q = (uint64_t)(x / s->cycle_bits), r = (uint64_t)(x % s->cycle_bits);
    uint64_t lo = 1, hi = s->n; /* positions j with bits[j] <= r: bits[0] = 0 always is */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (s->bits[mid] <= r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return q * s->n + lo;
}

/* Log-linear histogram of non-negative ns values: exact below 2^DH_SUB_BITS, then 2^DH_SUB_BITS
 * buckets per power of two (0.8 % resolution); exact count, min, max and sum. */
#define DH_SUB_BITS 7
#define DH_SUB (1 << DH_SUB_BITS)
#define DH_BUCKETS (DH_SUB + (63 - DH_SUB_BITS) * DH_SUB)
struct devhist {
    uint64_t n[DH_BUCKETS];
    uint64_t count;
    int64_t min, max;
    double sum;
};

static inline int dh_index(uint64_t v)
{
    if (v < DH_SUB)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* >= DH_SUB_BITS */
    return DH_SUB + (e - DH_SUB_BITS) * DH_SUB + (int)((v >> (e - DH_SUB_BITS)) - DH_SUB);
}

/* Largest value of bucket i. */
static inline uint64_t dh_upper(int i)
{
    if (i < DH_SUB)
        return (uint64_t)i;
    int e = DH_SUB_BITS + (i - DH_SUB) / DH_SUB;
    uint64_t m = (uint64_t)(DH_SUB + (i - DH_SUB) % DH_SUB);
    return ((m + 1) << (e - DH_SUB_BITS)) - 1;
}

/* Add n values v (negative values count as 0 in the buckets; min keeps them). */
static inline void dh_add(struct devhist *h, int64_t v, uint64_t n)
{
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (h->count == 0 || v > h->max)
        h->max = v;
    h->count += n;
    h->sum += (double)v * (double)n;
    h->n[dh_index(v > 0 ? (uint64_t)v : 0)] += n;
}

/* Upper bound of the q-quantile (the bucket's largest value, at most the exact maximum). */
static inline int64_t dh_quantile(const struct devhist *h, double q)
{
    uint64_t rank = (uint64_t)ceil(q * (double)h->count);
    if (rank < 1)
        rank = 1;
    uint64_t cum = 0;
    for (int i = 0; i < DH_BUCKETS; i++) {
        cum += h->n[i];
        if (cum >= rank) {
            int64_t u = (int64_t)dh_upper(i);
            return u < h->max ? u : h->max;
        }
    }
    return h->max;
}

static void dh_print(FILE *f, const struct devhist *h, const char *key)
{
    if (h->count == 0) {
        fprintf(f, "\"%s\": null", key);
        return;
    }
    fprintf(f,
            "\"%s\": {\"count\": %" PRIu64 ", \"min\": %" PRId64 ", \"p50\": %" PRId64 ", \"p90\": %" PRId64
            ", \"p99\": %" PRId64 ", \"p999\": %" PRId64 ", \"max\": %" PRId64 ", \"mean\": %.1f}",
            key, h->count, h->min, dh_quantile(h, 0.5), dh_quantile(h, 0.9), dh_quantile(h, 0.99),
            dh_quantile(h, 0.999), h->max, h->sum / (double)h->count);
}

/* Sleep (and optionally spin) until CLOCK_MONOTONIC reaches t; returns early on a stop request. */
static void wait_until(int64_t t, int64_t spin_ns)
{
    for (;;) {
        int64_t now = ct_now_ns(CLOCK_MONOTONIC);
        if (now >= t || ct_stop)
            return;
        if (t - now <= spin_ns) {
            while (!ct_stop && ct_now_ns(CLOCK_MONOTONIC) < t)
                __builtin_ia32_pause();
            return;
        }
        int64_t wake = t - spin_ns;
        if (wake - now > SLEEP_CHUNK_NS)
            wake = now + SLEEP_CHUNK_NS;
        struct timespec ts = ct_ts(wake);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}

int main(int argc, char **argv)
{
    ct_prog = "vrgen";
    struct opts o;
    parse_args(argc, argv, &o);

    struct sockaddr_storage dst;
    socklen_t dstlen;
    int fam = ct_parse_addr("--dst", o.dst, o.port, &dst, &dstlen);
    int overhead = fam == AF_INET6 ? CT_V6_OVERHEAD : CT_V4_OVERHEAD;
    int payload = o.frame - overhead; /* of the smallest size */
    if (payload < CT_HDR_BYTES)
        ct_usage_error("%s %d too small for IPv%d: UDP payload would be %d B, the payload header needs %d B "
                       "(minimum frame %d)",
                       o.have_sizes ? "--sizes: size" : "--frame", o.frame, fam == AF_INET6 ? 6 : 4, payload,
                       CT_HDR_BYTES, overhead + CT_HDR_BYTES);

    if (o.cpu >= 0)
        ct_pin_cpu(o.cpu);
    if (o.fifo > 0) {
        struct sched_param sp = {.sched_priority = o.fifo};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
            ct_die("--fifo %d: sched_setscheduler: %s", o.fifo, strerror(errno));
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* precise hrtimer wakeups */

    ct_catch_stop_signals(); /* no SA_RESTART: syscalls return EINTR */

    static struct cycle cyc;
    build_cycle(&o, &cyc);
    int max_frame = o.frame;
    for (int i = 0; i < o.nsizes; i++)
        if (o.size[i] > max_frame)
            max_frame = o.size[i];

    static struct pktframe pf;
    static int fds[CT_FLOWS_MAX], src_port[CT_FLOWS_MAX];
    static uint64_t flow_packets[CT_FLOWS_MAX], flow_errors[CT_FLOWS_MAX];
    int fd;
    size_t unit = (size_t)(max_frame - overhead); /* buffer bytes per packet: a UDP payload, or a whole frame */
    int len_off = overhead; /* iov_len = frame - len_off: the UDP payload, or the frame without FCS */
    if (o.pkt_dev) {
        unsigned char mac[6];
        pf_parse_mac("--dst-mac", o.dst_mac, mac);
        pf_open(&pf, o.pkt_dev, mac, &dst, dstlen, o.frame, o.sndbuf);
        fd = fds[0] = pf.fd;
        src_port[0] = pf.src_port;
        unit = (size_t)pf.len;
        len_off = 4;
    } else {
        for (int f = 0; f < o.flows; f++) {
            fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
            if (fd < 0)
                ct_die("socket: %s", strerror(errno));
            if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &o.sndbuf, sizeof o.sndbuf) != 0)
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.sndbuf, sizeof o.sndbuf);
            if (connect(fd, (struct sockaddr *)&dst, dstlen) != 0)
                ct_die("connect %s port %d: %s", o.dst, o.port, strerror(errno));
            struct sockaddr_storage src;
            socklen_t srclen = sizeof src;
            if (getsockname(fd, (struct sockaddr *)&src, &srclen) != 0)
                ct_die("getsockname: %s", strerror(errno));
            src_port[f] = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&src)->sin6_port
                                                : ((struct sockaddr_in *)&src)->sin_port);
            fds[f] = fd;
        }
        fd = fds[0];
    }
    int segs = 1; /* datagrams per message */
    if (o.gso) {
        int gso_size = payload;
        if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso_size, sizeof gso_size) != 0)
            ct_die("--gso: UDP_SEGMENT not supported: %s", strerror(errno));
        segs = GSO_BYTES / payload;
        if (segs > GSO_SEGS)
            segs = GSO_SEGS;
    }

    /* One buffer per batch slot; only the 16 header bytes (and in packet mode the UDP checksum)
     * change per packet. */
    unsigned char *bufs = calloc((size_t)o.batch * (size_t)segs, unit);
    struct mmsghdr *msgs = calloc((size_t)o.batch, sizeof *msgs);
    struct iovec *iov = calloc((size_t)o.batch, sizeof *iov);
    struct late_event *late = calloc(LATE_EVENTS_MAX, sizeof *late);
    if (!bufs || !msgs || !iov || !late)
        ct_die("out of memory");
    for (int i = 0; i < o.batch; i++) {
        iov[i].iov_base = bufs + (size_t)i * (size_t)segs * unit;
        if (o.pkt_dev)
            memcpy(iov[i].iov_base, pf.tmpl, unit);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    const int paced = o.rate_bps > 0;
    struct sched sc = {.n = (uint64_t)cyc.n, .cycle_bits = cyc.bits[cyc.n], .bits = cyc.bits,
                       .rate = paced ? o.rate_bps : 1};
    const int64_t dur_ns = (int64_t)llround(o.duration_s * 1e9);
    /* packets with due time < t0 + duration (paced); unlimited when duration is 0 */
    uint64_t end_k = UINT64_MAX;
    if (paced && dur_ns > 0)
        end_k = sched_due(&sc, dur_ns - 1);
    /* quantum: wait until this many packets are due (>= 1) */
    uint64_t quantum = 1;
    if (paced && o.quantum_us > 0) {
        quantum = sched_due(&sc, (int64_t)o.quantum_us * 1000) - 1;
        if (quantum < 1)
            quantum = 1;
        if (quantum > (uint64_t)o.batch * (uint64_t)segs) /* a burst is at most one sendmmsg call */
            quantum = (uint64_t)o.batch * (uint64_t)segs;
    }
    const int64_t spin_ns = (int64_t)o.spin_us * 1000;
    const int64_t late_ns = (int64_t)o.late_us * 1000;

    uint64_t k = 0, packets = 0, send_errors = 0, batches = 0, waits = 0, n_late = 0, late_dropped = 0;
    unsigned __int128 bits_total = 0; /* frame bits of the packets sent */
    const uint64_t run = (uint64_t)o.flow_run, nflows = (uint64_t)o.flows;
    uint64_t burst_end = 0; /* first packet after the burst being sent */
    int64_t max_late = 0;
    int is_late = 0, last_errno = 0;
    const char *stopped_by = "duration";
    static struct devhist dev, call; /* send - due time per packet; duration of each sendmmsg call */

    /* the realtime anchor first: t0 is then at or after the instant start_rt was read, so a
     * packet sent at or after its due time on CLOCK_MONOTONIC (t0 + offset) is stamped at or
     * after start_rt + offset on CLOCK_REALTIME, and sched_dev_ns (the stamps minus due times) is
     * never negative while the clock is not stepped */
    int64_t start_rt = ct_now_ns(CLOCK_REALTIME);
    int64_t t0 = ct_now_ns(CLOCK_MONOTONIC);
    int64_t t_end_mono = dur_ns > 0 ? t0 + dur_ns : INT64_MAX;
    int64_t prev_send = t0;
    struct ct_hist sent_hist = {.max_len = (size_t)SENT_HIST_MAX_S * 1000}; /* by send stamp */

    while (k < end_k) {
        if (ct_stop) {
            stopped_by = "signal";
            break;
        }
        int64_t now = ct_now_ns(CLOCK_MONOTONIC);
        uint64_t n;
        if (paced) {
            if (k >= burst_end) {
                /* the next burst: wait until its last packet k+quantum-1 is due, then take every
                 * packet due by then (when behind, that is at once: catch-up) */
                uint64_t kk = k + quantum - 1;
                if (kk >= end_k)
                    kk = end_k - 1;
                int64_t burst_due = t0 + sched_off(&sc, kk);
                if (now < burst_due) {
                    wait_until(burst_due, spin_ns);
                    waits++;
                    continue;
                }
                uint64_t due = sched_due(&sc, now - t0);
                if (due > end_k)
                    due = end_k;
                burst_end = due > kk ? due : kk + 1; /* kk is due at `now` (sched_due rounds down) */
            }
            n = burst_end - k; /* sent in calls of at most --batch packets, each with its own stamp */
            int64_t lateness = now - (t0 + sched_off(&sc, k));
            if (lateness > max_late)
                max_late = lateness;
            /* a silence of the generator: packets were due for more than late_ns and nothing was
             * sent for more than late_ns (a sink gap starting at this seq is the generator's) */
            is_late = lateness > late_ns && now - prev_send > late_ns;
        } else {
            if (now >= t_end_mono)
                break;
            n = (uint64_t)o.batch * (uint64_t)segs;
        }
        if (n > (uint64_t)o.batch * (uint64_t)segs)
            n = (uint64_t)o.batch * (uint64_t)segs;
        int flow = 0;
        if (nflows > 1) { /* one call per run of --flow-run sequence numbers, on the run's socket */
            uint64_t run_end = (k / run + 1) * run;
            if (n > run_end - k)
                n = run_end - k;
            flow = (int)((k / run) % nflows);
            fd = fds[flow];
        }

        int64_t ts = ct_now_ns(CLOCK_REALTIME);
        if (is_late) {
            if (n_late < LATE_EVENTS_MAX)
                late[n_late++] = (struct late_event){k, start_rt + sched_off(&sc, k), ts};
            else
                late_dropped++;
            is_late = 0;
        }
        prev_send = now;
        for (uint64_t i = 0; i < n; i++) {
            unsigned char *p = bufs + i * unit;
            if (o.pkt_dev) {
                pf_stamp(&pf, p, k + i, ts);
            } else {
                ct_put_le64(p, k + i);
                ct_put_le64(p + 8, (uint64_t)ts);
            }
        }
        unsigned nmsg = (unsigned)((n + (uint64_t)segs - 1) / (uint64_t)segs);
        if (segs == 1) { /* one packet per message, of its size in the cycle */
            uint64_t pos = sc.n == 1 ? 0 : k % sc.n;
            for (unsigned j = 0; j < nmsg; j++) {
                iov[j].iov_len = (size_t)(cyc.frame[pos] - len_off);
                if (++pos == sc.n)
                    pos = 0;
            }
        } else { /* GSO: one size */
            for (unsigned j = 0; j < nmsg; j++) {
                uint64_t in = n - (uint64_t)j * (uint64_t)segs;
                iov[j].iov_len = (size_t)(in < (uint64_t)segs ? in : (uint64_t)segs) * unit;
            }
        }
        int sent = sendmmsg(fd, msgs, nmsg, 0);
        int64_t after = ct_now_ns(CLOCK_MONOTONIC);
        batches++;
        dh_add(&call, after - now, 1);
        if (sent < 0) {
            if (errno == EINTR)
                continue;
            /* The slots pass (constant bit rate is kept); the sink sees them as lost. */
            last_errno = errno;
            uint64_t failed = segs == 1 ? 1 : iov[0].iov_len / unit;
            send_errors += failed;
            flow_errors[flow] += failed;
            k += failed;
            continue;
        }
        uint64_t done = 0;
        if (segs == 1)
            done = (uint64_t)sent;
        else
            for (int j = 0; j < sent; j++)
                done += iov[j].iov_len / unit;
        if (paced) /* the stamp each payload carries minus its due time, both on CLOCK_REALTIME as
                    * the receiver sees them (not `now`: a preemption between the two clock reads
                    * would make the record differ from the stamps by its length) */
            for (uint64_t i = 0; i < done; i++)
                dh_add(&dev, ts - (start_rt + sched_off(&sc, k + i)), 1);
        bits_total += sched_bits(&sc, k + done) - sched_bits(&sc, k);
        k += done;
        packets += done;
        flow_packets[flow] += done;
        if (done)
            ct_hist_add(&sent_hist, ct_ms_floor(ts), (uint32_t)done);
    }

    int64_t end_rt = ct_now_ns(CLOCK_REALTIME);
    if (paced && k >= end_k && dur_ns > 0 && !ct_stop) {
        /* stopped by the schedule: the interval is exactly the requested duration unless we ran late */
        if (end_rt < start_rt + dur_ns)
            end_rt = start_rt + dur_ns;
    }
    if (ct_stop)
        stopped_by = "signal";
    if (o.pkt_dev) {
        close(pf.fd);
        close(pf.udp_fd);
    } else {
        for (int f = 0; f < o.flows; f++)
            close(fds[f]);
    }

    double elapsed = (double)(end_rt - start_rt) / 1e9;
    double pps = elapsed > 0 ? (double)packets / elapsed : 0;
    uint64_t frame_bytes_total = (uint64_t)(bits_total / 8);
    double bps = elapsed > 0 ? (double)frame_bytes_total * 8 / elapsed : 0;
    double mean_frame = (double)sc.cycle_bits / 8 / (double)sc.n;
    printf("{\"tool\": \"vrgen\", \"version\": 1, \"clock\": \"CLOCK_REALTIME\", \"rate_convention\": \"%s\", ",
           CT_RATE_CONVENTION);
    printf("\"family\": %d, \"dst\": ", fam == AF_INET6 ? 6 : 4);
    ct_json_str(stdout, o.dst);
    printf(", \"port\": %d, \"frame_bytes\": %d, \"payload_bytes\": %d, \"requested_bps\": %" PRIu64
           ", \"duration_s\": %.9g, ",
           o.port, o.frame, payload, o.rate_bps, o.duration_s);
    printf("\"start_ns\": %" PRId64 ", \"end_ns\": %" PRId64 ", \"packets\": %" PRIu64 ", \"send_errors\": %" PRIu64
           ", \"achieved_pps\": %.3f, \"achieved_bps\": %.1f, ",
           start_rt, end_rt, packets, send_errors, pps, bps);
    printf("\"requested_pps\": %.3f, \"elapsed_s\": %.9f, \"stopped_by\": \"%s\", \"first_seq\": 0, "
           "\"next_seq\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"batch_max\": %d, \"quantum_packets\": %" PRIu64
           ", \"spin_us\": %d, \"cpu\": %d, \"gso_segments\": %d, \"fifo\": %d, ",
           paced ? (double)o.rate_bps * (double)sc.n / (double)sc.cycle_bits : 0.0, elapsed, stopped_by, k, batches,
           o.batch, quantum, o.spin_us, o.cpu, o.gso ? segs : 0, o.fifo);
    printf("\"quantum_us\": %d, \"waits\": %" PRIu64 ", \"stamp\": \"burst\", ", paced ? o.quantum_us : 0, waits);
    printf("\"flows\": %d, \"flow_run\": %d, \"flow_src_ports\": [", o.flows, o.flow_run);
    for (int f = 0; f < o.flows; f++)
        printf(f ? ", %d" : "%d", src_port[f]);
    printf("], \"flow_packets\": [");
    for (int f = 0; f < o.flows; f++)
        printf(f ? ", %" PRIu64 : "%" PRIu64, flow_packets[f]);
    printf("], \"flow_send_errors\": [");
    for (int f = 0; f < o.flows; f++)
        printf(f ? ", %" PRIu64 : "%" PRIu64, flow_errors[f]);
    printf("], \"sizes\": [");
    for (int i = 0; i < o.nsizes; i++)
        printf("%s[%d, %d]", i ? ", " : "", o.size[i], o.weight[i]);
    printf("], \"mean_frame_bytes\": %.17g, \"frame_bytes_total\": %" PRIu64 ", ", mean_frame, frame_bytes_total);
    dh_print(stdout, &dev, "sched_dev_ns");
    printf(", ");
    dh_print(stdout, &call, "send_call_ns");
    printf(", \"send_mode\": \"%s\", ", o.pkt_dev ? "packet" : "udp");
    if (o.pkt_dev) {
        printf("\"ifname\": ");
        ct_json_str(stdout, o.pkt_dev);
        printf(", \"dst_mac\": ");
        ct_json_str(stdout, o.dst_mac);
        printf(", \"src\": ");
        ct_json_str(stdout, pf.src_addr);
        printf(", \"src_port\": %d, ", pf.src_port);
    }
    printf("\"send_error_last\": ");
    ct_json_str(stdout, last_errno ? strerror(last_errno) : "");
    printf(", \"max_late_ns\": %" PRId64 ", \"late_threshold_ns\": %" PRId64 ", \"late_events_dropped\": %" PRIu64
           ", \"late_events\": [",
           max_late, late_ns, late_dropped);
    for (uint64_t i = 0; i < n_late; i++)
        printf("%s[%" PRIu64 ", %" PRId64 ", %" PRId64 "]", i ? ", " : "", late[i].seq, late[i].sched_ns,
               late[i].sent_ns);
    double cpu_user, cpu_sys;
    ct_cpu_times(&cpu_user, &cpu_sys);
    printf("], ");
    ct_hist_print(stdout, &sent_hist, "sent_hist");
    printf(", \"sent_hist_dropped\": %" PRIu64 ", \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f}\n", sent_hist.dropped,
           cpu_user, cpu_sys);
    fflush(stdout);
    free(bufs);
    free(msgs);
    free(iov);
    free(late);
    free(sent_hist.c);
    return 0;
}
