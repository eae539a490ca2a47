/* Shared helpers for vrgen and vrsink: argument parsing, errors, CPU pinning, stop signals, clocks,
 * payload layout.  Include it first, after defining _GNU_SOURCE (CPU_SET, sched_setaffinity). */
#ifndef VRMIG_CT_COMMON_H
#define VRMIG_CT_COMMON_H

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

/* Payload header carried by every packet: little-endian u64 sequence number and i64
 * CLOCK_REALTIME send time in ns.  Everything after it is zero padding. */
#define CT_HDR_BYTES 16
/* Ethernet frame = L3 packet + 14 B header + 4 B FCS; L3 overhead 20 (IPv4) / 40 (IPv6) + 8 UDP. */
#define CT_ETH_OVERHEAD 18
#define CT_V4_OVERHEAD (CT_ETH_OVERHEAD + 20 + 8) /* 46 */
#define CT_V6_OVERHEAD (CT_ETH_OVERHEAD + 40 + 8) /* 66 */
#define CT_FRAME_MIN 64
#define CT_FRAME_MAX 1518
/* vrgen --flows: sockets (source ports) at most; vrsink keeps per-flow counts for as many sources */
#define CT_FLOWS_MAX 256

#define CT_RATE_CONVENTION                                                                            \
    "ethernet-frame bits: frame_bytes*8 per packet, frame includes 14 B header and 4 B FCS, excludes " \
    "preamble and inter-frame gap"

#define CT_EXIT_USAGE 2
#define CT_EXIT_RUNTIME 1

static const char *ct_prog __attribute__((unused)) = "vr";

/* "<prog>: <message><tail>" on stderr, then exit with status. */
__attribute__((format(printf, 3, 0), noreturn)) static void ct_vexit(int status, const char *tail, const char *fmt,
                                                                     va_list ap)
{
    fprintf(stderr, "%s: ", ct_prog);
    vfprintf(stderr, fmt, ap);
    fputs(tail, stderr);
    exit(status);
}

/* One clear line on stderr, then exit 2 (bad arguments). */
__attribute__((format(printf, 1, 2), noreturn)) static void ct_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ct_vexit(CT_EXIT_USAGE, " (try --help)\n", fmt, ap);
}

/* One clear line on stderr, then exit 1 (runtime failure). */
__attribute__((format(printf, 1, 2), noreturn)) static void ct_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ct_vexit(CT_EXIT_RUNTIME, "\n", fmt, ap);
}

/* The getopt_long results both tools handle alike: 'h' (usage on stdout, exit 0), ':' (an option
 * without its value) and anything else (an unknown option). */
__attribute__((noreturn)) static void ct_other_opt(int c, char **argv, void (*usage)(FILE *))
{
    if (c == 'h') {
        usage(stdout);
        exit(0);
    }
    if (c == ':')
        ct_usage_error("option %s needs a value", argv[optind - 1]);
    ct_usage_error("unknown option '%s'", argv[optind - 1]);
}

/* Neither tool takes operands: a usage error if getopt_long left any. */
static inline void ct_no_operands(int argc, char **argv)
{
    if (optind < argc)
        ct_usage_error("unexpected argument '%s'", argv[optind]);
}

/* Pin this process to CPU cpu (--cpu); a refusal is a usage error. */
static inline void ct_pin_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        ct_usage_error("--cpu %d: %s", cpu, strerror(errno));
}

/* Set by SIGINT and SIGTERM once ct_catch_stop_signals() ran. */
static volatile sig_atomic_t ct_stop;

static void ct_on_signal(int sig)
{
    (void)sig;
    ct_stop = 1;
}

/* SIGINT and SIGTERM set ct_stop; no SA_RESTART, so a blocking call they interrupt returns EINTR. */
static inline void ct_catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = ct_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static inline int64_t ct_now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline struct timespec ct_ts(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    return ts;
}

/* Integer in [lo, hi]; whole string must parse. */
static inline long long ct_parse_int(const char *opt, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        ct_usage_error("%s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        ct_usage_error("%s: %lld out of range %lld..%lld", opt, v, lo, hi);
    return v;
}

/* Non-negative finite decimal number, whole string must parse. */
static inline double ct_parse_double(const char *opt, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v))
        ct_usage_error("%s: '%s' is not a number", opt, s);
    if (v < lo || v > hi)
        ct_usage_error("%s: %s out of range %g..%g", opt, s, lo, hi);
    return v;
}

/* Bit rate: decimal number with optional SI suffix k/K, M, G (powers of 1000), e.g. 100M, 2.5G. */
static inline uint64_t ct_parse_rate(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v))
        ct_usage_error("%s: '%s' is not a bit rate (e.g. 100M, 2.5G, 0 = unpaced)", opt, s);
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1e3, end++;
    else if (*end == 'M')
        mult = 1e6, end++;
    else if (*end == 'G')
        mult = 1e9, end++;
    if (*end != '\0')
        ct_usage_error("%s: '%s' is not a bit rate (e.g. 100M, 2.5G, 0 = unpaced)", opt, s);
    v *= mult;
    if (v < 0 || v > 1e12)
        ct_usage_error("%s: %s out of range 0..1000G", opt, s);
    if (v > 0 && v < 1)
        ct_usage_error("%s: %s below 1 bit/s", opt, s);
    return (uint64_t)llround(v);
}

/* Numeric IPv4/IPv6 address (IPv6 may carry %scope) to sockaddr; returns family. */
static inline int ct_parse_addr(const char *opt, const char *s, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(s, portstr, &hints, &res);
    if (rc != 0 || res == NULL)
        ct_usage_error("%s: '%s' is not a numeric IPv4 or IPv6 address", opt, s);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    int fam = res->ai_family;
    freeaddrinfo(res);
    return fam;
}

static inline void ct_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t ct_get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* CPU time used by this process so far, user and system seconds. */
static inline void ct_cpu_times(double *user_s, double *sys_s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    *sys_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* JSON string (addresses only; escape the few characters that could matter). */
static inline void ct_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* ---- per-millisecond histogram (counts per CLOCK_REALTIME ms from start_ms; grows on demand,
 * at most max_len buckets: anything further away is counted in dropped) ---- */
struct ct_hist {
    uint32_t *c;
    int64_t start_ms;
    size_t len, cap, max_len;
    uint64_t dropped;
};

/* floor(t_ns / 1 ms), also for negative times */
static inline int64_t ct_ms_floor(int64_t t_ns)
{
    return t_ns >= 0 ? t_ns / 1000000 : (t_ns - 999999) / 1000000;
}

static inline void ct_hist_grow(struct ct_hist *h, size_t need)
{
    if (need <= h->cap)
        return;
    size_t nc = h->cap;
    while (nc < need)
        nc *= 2;
    uint32_t *n = realloc(h->c, nc * sizeof *n);
    if (!n)
        ct_die("out of memory");
    memset(n + h->cap, 0, (nc - h->cap) * sizeof *n);
    h->c = n;
    h->cap = nc;
}

/* Add n to the bucket of millisecond ms. */
static inline void ct_hist_add(struct ct_hist *h, int64_t ms, uint32_t n)
{
    if (h->cap == 0) {
        h->cap = 65536;
        h->c = calloc(h->cap, sizeof *h->c);
        if (!h->c)
            ct_die("out of memory");
        h->start_ms = ms;
        h->len = 1;
    }
    if (ms < h->start_ms) { /* earlier than the first one: shift right */
        size_t shift = (size_t)(h->start_ms - ms);
        if (h->len + shift > h->max_len) {
            h->dropped += n;
            return;
        }
        ct_hist_grow(h, h->len + shift);
        memmove(h->c + shift, h->c, h->len * sizeof *h->c);
        memset(h->c, 0, shift * sizeof *h->c);
        h->len += shift;
        h->start_ms = ms;
    }
    size_t i = (size_t)(ms - h->start_ms);
    if (i >= h->max_len) {
        h->dropped += n;
        return;
    }
    ct_hist_grow(h, i + 1);
    if (i >= h->len)
        h->len = i + 1;
    h->c[i] += n;
}

/* JSON members "<key>_start_ms": N, "<key>_ms": [...] (no separator around them). */
static inline void ct_hist_print(FILE *f, const struct ct_hist *h, const char *key)
{
    fprintf(f, "\"%s_start_ms\": %" PRId64 ", \"%s_ms\": [", key, h->len ? h->start_ms : 0, key);
    for (size_t i = 0; i < h->len; i++)
        fprintf(f, i ? ",%u" : "%u", h->c[i]);
    fputc(']', f);
}

#endif
