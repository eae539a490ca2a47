/* vrtcp: TCP cross-traffic for vrmig -- bulk flows with per-interval TCP_INFO and goodput traces,
 * and open-loop request/response.
 *
 * Why a helper of our own: the existing tools do not give per-10-ms data.  iperf3's interval
 * reports are at least 100 ms and aggregate the interval; netperf's and flent's demo mode report
 * at a similar granularity; neither records the receive-side silences of a flow.  vrtcp samples
 * what the kernel knows (TCP_INFO of every sending socket, the cumulative bytes every receiving
 * socket has returned) on a timerfd every --sample-ms and writes them as TSV, and the sink logs
 * every silence between two reads of a flow longer than --gap-ms.
 *
 *   vrtcp sink      --bind ADDR --port P --flows N --sample-ms MS --out FILE [--gap-ms G] [--duration S]
 *   vrtcp send      --dst ADDR --port P --flows N [--cc NAME] [--rate BPS] --sample-ms MS --out FILE
 *                   [--duration S] [--write-bytes B]
 *   vrtcp rr-server --bind ADDR --port P --flows N --resp BYTES [--duration S]
 *   vrtcp rr-client --dst ADDR --port P --flows N --rate TPS --req BYTES --resp BYTES --out FILE [--duration S]
 *
 * Wire formats.  Bulk: every connection starts with the flow index as u32 little endian, then
 * payload (zeros) until the sender stops.  Request/response: every connection starts with u32 flow
 * index and u32 request size (little endian), so the server needs no --req; then requests of
 * --req bytes whose first 8 bytes are the transaction id (u64 LE), each answered with --resp
 * bytes starting with the same id.
 *
 * Clocks: sampling and the request schedule run on CLOCK_MONOTONIC (timerfd); every time written
 * is CLOCK_REALTIME ns.  Readiness: "READY" on stderr (sink and rr-server once listening, send and
 * rr-client once all N connections are established).  Stop: SIGINT/SIGTERM or --duration; then
 * one JSON object on stdout.  Signals are blocked except inside epoll_pwait(), so a stop is never
 * missed between a check and a wait.  Bad arguments: one line on stderr, exit 2, no file created
 * (output files are opened only after the arguments are checked).
 */
#define _GNU_SOURCE
#include "common.h"

#include <arpa/inet.h>
#include <linux/tcp.h> /* struct tcp_info of the kernel (netinet/tcp.h's is an older subset) */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#define VRTCP_MAX_FLOWS 256
#define RR_BYTES_MIN 8 /* the transaction id */
#define RR_BYTES_MAX 65536
#define RR_PIPELINE_MAX 64 /* responses a server queues per connection before it stops reading */
#define SAMPLE_MS_MAX 60000
#define GAP_MS_DEFAULT 20
#define WRITE_BYTES_DEFAULT 65536
#define WRITE_BYTES_MAX (16 << 20)
#define READ_BUF_BYTES (1 << 20) /* one recv() of the sink: large, so a read drains the socket */
#define ERRORS_MAX 256
#define MAX_EVENTS 64
#define CONNECT_TIMEOUT_MS 30000 /* the kernel's SYN retries take over 2 min: fail sooner, clearly */
#define RR_DRAIN_NS 1000000000LL /* after --duration, wait this long for outstanding responses */
#define RR_TPS_MAX 1e6
#define BULK_HDR 4
#define RR_HDR 8
#define CA_NAME_MAX 16 /* TCP_CA_NAME_MAX of the kernel (not in the uapi headers) */
#define TAG_LISTEN UINT64_MAX
#define TAG_TIMER (UINT64_MAX - 1)

/* ---- errors collected for the JSON summary ---- */
struct errlog {
    int64_t t_ns[ERRORS_MAX];
    int flow[ERRORS_MAX];
    char msg[ERRORS_MAX][128];
    int n;
    uint64_t dropped;
};

__attribute__((format(printf, 3, 4))) static void err_add(struct errlog *e, int flow, const char *fmt, ...)
{
    if (e->n >= ERRORS_MAX) {
        e->dropped++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg[e->n], sizeof e->msg[e->n], fmt, ap);
    va_end(ap);
    e->t_ns[e->n] = ct_now_ns(CLOCK_REALTIME);
    e->flow[e->n] = flow;
    e->n++;
}

static void err_print(FILE *f, const struct errlog *e)
{
    fputs("\"errors\": [", f);
    for (int i = 0; i < e->n; i++) {
        fprintf(f, "%s{\"t_ns\": %" PRId64 ", \"flow\": %d, \"error\": ", i ? ", " : "", e->t_ns[i], e->flow[i]);
        ct_json_str(f, e->msg[i]);
        fputc('}', f);
    }
    fprintf(f, "], \"errors_dropped\": %" PRIu64, e->dropped);
}

/* ---- options ---- */
enum mode { M_SINK, M_SEND, M_RR_SERVER, M_RR_CLIENT };
static const char *const MODE_NAME[] = {"sink", "send", "rr-server", "rr-client"};

struct opts {
    enum mode mode;
    const char *addr; /* --bind or --dst */
    int port;
    int flows;
    int sample_ms;
    const char *out;
    int64_t gap_ns;
    int gap_ms;
    double duration_s;
    const char *cc;
    uint64_t rate_bps;
    double tps;
    int req, resp;
    long write_bytes;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vrtcp sink      --bind ADDR --port P --flows N --sample-ms MS --out FILE [--gap-ms G]\n"
            "                       [--duration S]\n"
            "       vrtcp send      --dst ADDR --port P --flows N [--cc NAME] [--rate BPS] --sample-ms MS\n"
            "                       --out FILE [--duration S] [--write-bytes B]\n"
            "       vrtcp rr-server --bind ADDR --port P --flows N --resp BYTES [--duration S]\n"
            "       vrtcp rr-client --dst ADDR --port P --flows N --rate TPS --req BYTES --resp BYTES\n"
            "                       --out FILE [--duration S]\n"
            "TCP bulk flows with TCP_INFO / goodput traces, and open-loop TCP request/response.\n"
            "  --flows N        connections, 1..%d\n"
            "  --sample-ms MS   sampling period, 1..%d ms (timerfd on CLOCK_MONOTONIC)\n"
            "  --out FILE       TSV trace with a header line; sink: t_ns flow bytes (cumulative payload\n"
            "                   received, the 4-byte flow index excluded) and FILE.gaps; send: TCP_INFO\n"
            "                   per flow; rr-client: id flow t_sched_ns t_send_ns t_done_ns\n"
            "  --gap-ms G       sink: log every silence > G ms between two reads of a flow (default %d)\n"
            "  --cc NAME        congestion control of every flow (tcp_available_congestion_control)\n"
            "  --rate BPS       send: SO_MAX_PACING_RATE per flow, bits/s, suffix k/M/G (x1000), 0 =\n"
            "                   unpaced (the kernel paces TCP segments: payload plus TCP header);\n"
            "                   rr-client: transactions/s over all flows (> 0)\n"
            "  --req/--resp B   request / response bytes, %d..%d (the first 8 bytes carry the id)\n"
            "  --write-bytes B  send: bytes per write call, 1..%d (default %d)\n"
            "  --duration S     stop after S seconds (default 0 = until SIGINT/SIGTERM); rr-client then\n"
            "                   waits up to 1 s for outstanding responses\n"
            "Times are CLOCK_REALTIME ns.  READY on stderr when listening / connected; one JSON object\n"
            "on stdout at exit.  Bad arguments: exit 2.\n",
            VRTCP_MAX_FLOWS, SAMPLE_MS_MAX, GAP_MS_DEFAULT, RR_BYTES_MIN, RR_BYTES_MAX, WRITE_BYTES_MAX,
            WRITE_BYTES_DEFAULT);
}

/* Transactions per second: a positive decimal number. */
static double parse_tps(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > RR_TPS_MAX)
        ct_usage_error("--rate: '%s' is not a transaction rate: give transactions/s, > 0 and <= %g", s, RR_TPS_MAX);
    return v;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    if (argc < 2)
        ct_usage_error("give a subcommand: sink, send, rr-server or rr-client");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        exit(0);
    }
    *o = (struct opts){.port = -1, .flows = -1, .sample_ms = -1, .gap_ms = GAP_MS_DEFAULT, .req = -1,
                       .resp = -1, .tps = -1, .write_bytes = WRITE_BYTES_DEFAULT};
    int m = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(argv[1], MODE_NAME[i]) == 0)
            m = i;
    if (m < 0)
        ct_usage_error("unknown subcommand '%s': give sink, send, rr-server or rr-client", argv[1]);
    o->mode = (enum mode)m;
    const int listens = o->mode == M_SINK || o->mode == M_RR_SERVER;
    static const struct option lo[] = {
        {"bind", required_argument, 0, 'B'},      {"dst", required_argument, 0, 'd'},
        {"port", required_argument, 0, 'p'},      {"flows", required_argument, 0, 'n'},
        {"sample-ms", required_argument, 0, 's'}, {"out", required_argument, 0, 'o'},
        {"gap-ms", required_argument, 0, 'g'},    {"duration", required_argument, 0, 't'},
        {"cc", required_argument, 0, 'c'},        {"rate", required_argument, 0, 'r'},
        {"req", required_argument, 0, 'q'},       {"resp", required_argument, 0, 'R'},
        {"write-bytes", required_argument, 0, 'w'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    /* the options each subcommand takes */
    static const char *const allowed[] = {
        [M_SINK] = "Bpnsogt", [M_SEND] = "dpncrsotw", [M_RR_SERVER] = "BpnRt", [M_RR_CLIENT] = "dpnrqRot"};
    opterr = 0;
    optind = 2;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":h", lo, &li)) != -1) {
        if (c != 'h' && c != ':' && c != '?' && !strchr(allowed[o->mode], c))
            ct_usage_error("%s does not take --%s", MODE_NAME[o->mode], lo[li].name);
        switch (c) {
        case 'B':
        case 'd': o->addr = optarg; break;
        case 'p': o->port = (int)ct_parse_int("--port", optarg, 1, 65535); break;
        case 'n': o->flows = (int)ct_parse_int("--flows", optarg, 1, VRTCP_MAX_FLOWS); break;
        case 's': o->sample_ms = (int)ct_parse_int("--sample-ms", optarg, 1, SAMPLE_MS_MAX); break;
        case 'o': o->out = optarg; break;
        case 'g': o->gap_ms = (int)ct_parse_int("--gap-ms", optarg, 1, 3600000); break;
        case 't': o->duration_s = ct_parse_double("--duration", optarg, 0, 1e7); break;
        case 'c': o->cc = optarg; break;
        case 'r':
            if (o->mode == M_SEND) {
                o->rate_bps = ct_parse_rate("--rate", optarg);
                if (o->rate_bps > 0 && o->rate_bps < 8)
                    ct_usage_error("--rate %s: below 8 bit/s, the pacing's unit is bytes/s (0 = unpaced)", optarg);
            } else
                o->tps = parse_tps(optarg);
            break;
        case 'q': o->req = (int)ct_parse_int("--req", optarg, RR_BYTES_MIN, RR_BYTES_MAX); break;
        case 'R': o->resp = (int)ct_parse_int("--resp", optarg, RR_BYTES_MIN, RR_BYTES_MAX); break;
        case 'w': o->write_bytes = (long)ct_parse_int("--write-bytes", optarg, 1, WRITE_BYTES_MAX); break;
        default: ct_other_opt(c, argv, usage);
        }
    }
    ct_no_operands(argc, argv);
    o->gap_ns = (int64_t)o->gap_ms * 1000000;
    if (!o->addr)
        ct_usage_error(listens ? "--bind ADDR is required (a numeric IPv4 or IPv6 address)"
                               : "--dst ADDR is required (a numeric IPv4 or IPv6 address)");
    if (o->port < 0)
        ct_usage_error("--port P is required (1..65535)");
    if (o->flows < 0)
        ct_usage_error("--flows N is required (1..%d)", VRTCP_MAX_FLOWS);
    if ((o->mode == M_SINK || o->mode == M_SEND) && o->sample_ms < 0)
        ct_usage_error("--sample-ms MS is required (1..%d)", SAMPLE_MS_MAX);
    if (o->mode != M_RR_SERVER && !o->out)
        ct_usage_error("--out FILE is required");
    if (o->mode == M_RR_CLIENT && o->tps < 0)
        ct_usage_error("--rate TPS is required (transactions/s over all flows, > 0)");
    if (o->mode == M_RR_CLIENT && o->req < 0)
        ct_usage_error("--req BYTES is required (%d..%d)", RR_BYTES_MIN, RR_BYTES_MAX);
    if ((o->mode == M_RR_CLIENT || o->mode == M_RR_SERVER) && o->resp < 0)
        ct_usage_error("--resp BYTES is required (%d..%d)", RR_BYTES_MIN, RR_BYTES_MAX);
}

/* A one-line error about an argument, exit 2, without the "(try --help)" tail. */
__attribute__((format(printf, 1, 2), noreturn)) static void arg_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ct_vexit(CT_EXIT_USAGE, "\n", fmt, ap);
}

/* The first line of a /proc file without its newline ("" if unreadable). */
static void read_proc_line(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

static int word_in(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; *p;) {
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        if (k == n && strncmp(p, w, n) == 0)
            return 1;
        p += k;
    }
    return 0;
}

/* --cc: the kernel must offer NAME, and this process must be allowed to set it (probed on a
 * socket of its own before any connection or file exists). */
static void check_cc(const char *cc, int fam)
{
    char avail[1024], allowed[1024];
    read_proc_line("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof avail);
    if (avail[0] && !word_in(avail, cc))
        arg_fail("--cc %s: the kernel does not offer it (available: %s)", cc, avail);
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        ct_die("socket: %s", strerror(errno));
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) != 0) {
        int e = errno;
        close(fd);
        read_proc_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof allowed);
        if (e == EPERM)
            arg_fail("--cc %s: not permitted for this user (allowed: %s)", cc, allowed);
        arg_fail("--cc %s: the kernel does not offer it (%s; available: %s)", cc, strerror(e), avail);
    }
    close(fd);
}

static FILE *open_out(const char *path)
{
    FILE *f = fopen(path, "we");
    if (!f)
        arg_fail("--out %s: %s (give a writable file path)", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    return f;
}

static void flush_out(FILE *f, const char *path)
{
    if (fflush(f) != 0)
        ct_die("--out %s: write failed: %s", path, strerror(errno));
}

static void close_out(FILE *f, const char *path)
{
    if (fclose(f) != 0)
        ct_die("--out %s: write failed: %s", path, strerror(errno));
}

/* ---- sockets, epoll, signals ---- */
static sigset_t wait_mask; /* the mask inside epoll_pwait: stop signals unblocked */

/* Block SIGINT/SIGTERM except inside epoll_pwait(), where they set ct_stop and end the wait. */
static void setup_signals(void)
{
    ct_catch_stop_signals();
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &wait_mask);
    sigdelset(&wait_mask, SIGINT);
    sigdelset(&wait_mask, SIGTERM);
}

static int ep_wait(int ep, struct epoll_event *ev, int timeout_ms)
{
    int n = epoll_pwait(ep, ev, MAX_EVENTS, timeout_ms, &wait_mask);
    if (n < 0 && errno != EINTR)
        ct_die("epoll_pwait: %s", strerror(errno));
    return n < 0 ? 0 : n;
}

static void ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};
    if (epoll_ctl(ep, op, fd, &ev) != 0)
        ct_die("epoll_ctl: %s", strerror(errno));
}

/* Periodic (interval_ns > 0) or one-shot absolute CLOCK_MONOTONIC timer. */
static void timer_set(int tfd, int64_t first_mono_ns, int64_t interval_ns)
{
    struct itimerspec its = {.it_value = ct_ts(first_mono_ns), .it_interval = ct_ts(interval_ns)};
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        ct_die("timerfd_settime: %s", strerror(errno));
}

static uint64_t timer_read(int tfd)
{
    uint64_t n = 0;
    if (read(tfd, &n, sizeof n) != (ssize_t)sizeof n)
        return 0;
    return n;
}

static int listen_on(const char *bind_str, int port, int *fam_out)
{
    struct sockaddr_storage addr;
    socklen_t alen;
    int fam = ct_parse_addr("--bind", bind_str, port, &addr, &alen);
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        ct_die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, alen) != 0)
        ct_die("bind %s port %d: %s", bind_str, port, strerror(errno));
    if (listen(fd, SOMAXCONN) != 0)
        ct_die("listen: %s", strerror(errno));
    *fam_out = fam;
    return fd;
}

struct peer {
    char addr[INET6_ADDRSTRLEN];
    int port;
};

static void peer_of(const struct sockaddr_storage *ss, struct peer *p)
{
    p->addr[0] = '\0';
    p->port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, p->addr, sizeof p->addr);
        p->port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, p->addr, sizeof p->addr);
        p->port = ntohs(a->sin6_port);
    }
}

static int local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    struct peer p;
    if (getsockname(fd, (struct sockaddr *)&ss, &l) != 0)
        return -1;
    peer_of(&ss, &p);
    return p.port;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

struct conn_opts {
    const char *cc;
    uint64_t pacing_Bps; /* 0 = unpaced */
    int nodelay;
};

/* Open n connections in parallel (non-blocking connect, each from its own ephemeral port),
 * with the congestion control and pacing set before connect; wait until all are established. */
static void connect_all(const struct opts *o, const struct conn_opts *co, int *fds, int ep)
{
    struct sockaddr_storage dst;
    socklen_t dlen;
    int fam = ct_parse_addr("--dst", o->addr, o->port, &dst, &dlen);
    int pending = 0;
    for (int i = 0; i < o->flows; i++) {
        int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            ct_die("socket: %s", strerror(errno));
        if (co->cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, co->cc, (socklen_t)strlen(co->cc)) != 0)
            ct_die("--cc %s: %s", co->cc, strerror(errno));
        if (co->pacing_Bps) {
            uint64_t r = co->pacing_Bps;
            if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &r, sizeof r) != 0)
                ct_die("--rate: SO_MAX_PACING_RATE: %s", strerror(errno));
        }
        int one = 1;
        if (co->nodelay)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&dst, dlen) != 0 && errno != EINPROGRESS)
            ct_die("connect %s port %d (flow %d): %s", o->addr, o->port, i, strerror(errno));
        fds[i] = fd;
        ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT, (uint64_t)i);
        pending++;
    }
    int64_t deadline = ct_now_ns(CLOCK_MONOTONIC) + (int64_t)CONNECT_TIMEOUT_MS * 1000000;
    struct epoll_event ev[MAX_EVENTS];
    while (pending > 0) {
        int64_t left = deadline - ct_now_ns(CLOCK_MONOTONIC);
        if (left <= 0)
            ct_die("connect %s port %d: %d of %d connections not established within %d s", o->addr, o->port,
                   pending, o->flows, CONNECT_TIMEOUT_MS / 1000);
        int n = ep_wait(ep, ev, (int)(left / 1000000) + 1);
        if (ct_stop)
            ct_die("stopped by a signal before all %d connections were established", o->flows);
        for (int k = 0; k < n; k++) {
            int i = (int)ev[k].data.u64;
            int err = 0;
            socklen_t l = sizeof err;
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &l);
            if (err)
                ct_die("connect %s port %d (flow %d): %s", o->addr, o->port, i, strerror(err));
            ep_ctl(ep, EPOLL_CTL_DEL, fds[i], 0, 0);
            pending--;
        }
    }
}

/* Send a short preamble on a fresh connection (it fits its empty send buffer). */
static void send_preamble(int fd, const unsigned char *p, size_t len, int flow)
{
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
    if (w != (ssize_t)len)
        ct_die("flow %d: sending the %zu-byte preamble: %s", flow, len, w < 0 ? strerror(errno) : "short write");
}

static void ready(void)
{
    fprintf(stderr, "READY\n");
    fflush(stderr);
}

static int64_t deadline_of(double duration_s)
{
    return duration_s > 0 ? ct_now_ns(CLOCK_MONOTONIC) + (int64_t)llround(duration_s * 1e9) : INT64_MAX;
}

/* ================================ sink ================================ */
struct sink_flow {
    int mapped;
    uint64_t bytes; /* payload received, the 4-byte flow index excluded */
    int64_t last_read_ns, closed_ns;
    struct peer peer;
};

struct sink_conn {
    int fd; /* -1: free slot */
    int flow; /* -1 until the flow index is read */
    unsigned char hdr[BULK_HDR];
    int hdr_n;
    struct peer peer;
};

static void sink_close(int ep, struct sink_conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

static int run_sink(const struct opts *o)
{
    int fam;
    int lfd = listen_on(o->addr, o->port, &fam);
    char gaps_path[4096];
    if (snprintf(gaps_path, sizeof gaps_path, "%s.gaps", o->out) >= (int)sizeof gaps_path)
        arg_fail("--out %s: path too long", o->out);
    FILE *out = open_out(o->out);
    FILE *gaps = fopen(gaps_path, "we");
    if (!gaps) {
        int e = errno;
        fclose(out);
        unlink(o->out);
        arg_fail("--out %s: %s: %s (give a writable file path)", o->out, gaps_path, strerror(e));
    }
    fputs("t_ns\tflow\tbytes\n", out);
    fputs("flow\tt_before_ns\tt_after_ns\tbytes_before\n", gaps);

    const int n = o->flows;
    struct sink_flow *fl = calloc((size_t)n, sizeof *fl);
    struct sink_conn *cs = calloc((size_t)n, sizeof *cs);
    unsigned char *buf = malloc(READ_BUF_BYTES);
    static struct errlog errs;
    if (!fl || !cs || !buf)
        ct_die("out of memory");
    for (int i = 0; i < n; i++)
        cs[i].fd = cs[i].flow = -1;

    int ep = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || tfd < 0)
        ct_die("epoll/timerfd: %s", strerror(errno));
    ep_ctl(ep, EPOLL_CTL_ADD, lfd, EPOLLIN, TAG_LISTEN);
    ep_ctl(ep, EPOLL_CTL_ADD, tfd, EPOLLIN, TAG_TIMER);
    const int64_t period = (int64_t)o->sample_ms * 1000000;
    const int64_t deadline = deadline_of(o->duration_s);
    timer_set(tfd, ct_now_ns(CLOCK_MONOTONIC) + period, period);

    uint64_t rows = 0, n_gaps = 0, missed = 0;
    int connected = 0;
    int64_t t_first = -1, t_last = -1;
    const char *stopped_by = "signal";
    ready();

    struct epoll_event ev[MAX_EVENTS];
    for (;;) {
        int k = ep_wait(ep, ev, -1);
        for (int e = 0; e < k; e++) {
            uint64_t tag = ev[e].data.u64;
            if (tag == TAG_TIMER) {
                uint64_t exp = timer_read(tfd);
                if (exp > 1)
                    missed += exp - 1;
                if (ct_now_ns(CLOCK_MONOTONIC) >= deadline) { /* the final row set follows */
                    stopped_by = "duration";
                    ct_stop = 1;
                    continue;
                }
                int64_t t = ct_now_ns(CLOCK_REALTIME);
                for (int f = 0; f < n; f++)
                    if (fl[f].mapped) {
                        fprintf(out, "%" PRId64 "\t%d\t%" PRIu64 "\n", t, f, fl[f].bytes);
                        rows++;
                    }
                flush_out(out, o->out);
                flush_out(gaps, gaps_path);
            } else if (tag == TAG_LISTEN) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                int cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0)
                    continue;
                struct peer p;
                peer_of(&ss, &p);
                int slot = -1;
                for (int i = 0; i < n && slot < 0; i++)
                    if (cs[i].fd < 0 && !(cs[i].flow >= 0 && fl[cs[i].flow].mapped))
                        slot = i;
                if (slot < 0) {
                    err_add(&errs, -1, "connection from %s port %d beyond --flows %d: closed", p.addr, p.port, n);
                    close(cfd);
                    continue;
                }
                cs[slot] = (struct sink_conn){.fd = cfd, .flow = -1, .peer = p};
                ep_ctl(ep, EPOLL_CTL_ADD, cfd, EPOLLIN, (uint64_t)slot);
            } else {
                struct sink_conn *c = &cs[tag];
                if (c->fd < 0)
                    continue;
                ssize_t r = recv(c->fd, buf, READ_BUF_BYTES, 0);
                int64_t t = ct_now_ns(CLOCK_REALTIME);
                if (r < 0) {
                    if (errno == EAGAIN || errno == EINTR)
                        continue;
                    err_add(&errs, c->flow, "recv: %s", strerror(errno));
                    if (c->flow >= 0)
                        fl[c->flow].closed_ns = t;
                    sink_close(ep, c);
                    continue;
                }
                if (r == 0) {
                    if (c->flow >= 0)
                        fl[c->flow].closed_ns = t;
                    else
                        err_add(&errs, -1, "connection from %s port %d closed before its flow index", c->peer.addr,
                                c->peer.port);
                    sink_close(ep, c);
                    continue;
                }
                size_t off = 0;
                if (c->flow < 0) {
                    while (c->hdr_n < BULK_HDR && off < (size_t)r)
                        c->hdr[c->hdr_n++] = buf[off++];
                    if (c->hdr_n < BULK_HDR)
                        continue;
                    uint32_t f = get_le32(c->hdr);
                    if (f >= (uint32_t)n || fl[f].mapped) {
                        err_add(&errs, -1, "connection from %s port %d: flow index %u %s: closed", c->peer.addr,
                                c->peer.port, f, f >= (uint32_t)n ? "out of range" : "already connected");
                        sink_close(ep, c);
                        continue;
                    }
                    c->flow = (int)f;
                    fl[f].mapped = 1;
                    fl[f].peer = c->peer;
                    fl[f].closed_ns = -1;
                    fl[f].last_read_ns = t;
                    connected++;
                } else {
                    struct sink_flow *sf = &fl[c->flow];
                    if (t - sf->last_read_ns > o->gap_ns) {
                        fprintf(gaps, "%d\t%" PRId64 "\t%" PRId64 "\t%" PRIu64 "\n", c->flow, sf->last_read_ns, t,
                                sf->bytes);
                        n_gaps++;
                    }
                    sf->last_read_ns = t;
                }
                if ((size_t)r > off) {
                    fl[c->flow].bytes += (uint64_t)r - off;
                    if (t_first < 0)
                        t_first = t;
                    t_last = t;
                }
            }
        }
        if (ct_stop)
            break;
    }
    int64_t t = ct_now_ns(CLOCK_REALTIME); /* the final row set */
    for (int f = 0; f < n; f++)
        if (fl[f].mapped) {
            fprintf(out, "%" PRId64 "\t%d\t%" PRIu64 "\n", t, f, fl[f].bytes);
            rows++;
        }
    close_out(out, o->out);
    close_out(gaps, gaps_path);
    for (int i = 0; i < n; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    close(lfd);
    close(tfd);
    close(ep);

    printf("{\"tool\": \"vrtcp\", \"mode\": \"sink\", \"version\": 1, \"clock\": \"CLOCK_REALTIME\", \"flows\": %d, "
           "\"connected\": %d, \"sample_ms\": %d, \"gap_ms\": %d, \"bytes_exclude_header\": true, \"bytes\": [",
           n, connected, o->sample_ms, o->gap_ms);
    for (int f = 0; f < n; f++)
        printf(f ? ", %" PRIu64 : "%" PRIu64, fl[f].bytes);
    printf("], \"samples\": %" PRIu64 ", \"ticks_missed\": %" PRIu64 ", \"gaps\": %" PRIu64 ", ", rows, missed,
           n_gaps);
    if (t_first >= 0)
        printf("\"t_first_ns\": %" PRId64 ", \"t_last_ns\": %" PRId64 ", ", t_first, t_last);
    else
        printf("\"t_first_ns\": null, \"t_last_ns\": null, ");
    printf("\"stopped_by\": \"%s\", \"peers\": [", stopped_by);
    int first = 1;
    for (int f = 0; f < n; f++) {
        if (!fl[f].mapped)
            continue;
        printf("%s{\"flow\": %d, \"addr\": ", first ? "" : ", ", f);
        ct_json_str(stdout, fl[f].peer.addr);
        printf(", \"port\": %d, \"closed_ns\": ", fl[f].peer.port);
        if (fl[f].closed_ns >= 0)
            printf("%" PRId64 "}", fl[f].closed_ns);
        else
            printf("null}");
        first = 0;
    }
    printf("], ");
    err_print(stdout, &errs);
    printf("}\n");
    fflush(stdout);
    free(fl);
    free(cs);
    free(buf);
    return 0;
}

/* ================================ send ================================ */
/* TcpExt counters of /proc/net/netstat the summary reports (namespace-wide). */
static const char *const NETSTAT_KEYS[] = {"TCPTimeouts",    "TCPSpuriousRTOs",      "TCPLossProbes",
                                           "TCPLossProbeRecovery", "TCPDSACKRecv", "TCPRetransFail",
                                           "TCPLostRetransmit"};
#define N_NETSTAT (sizeof NETSTAT_KEYS / sizeof NETSTAT_KEYS[0])

struct netstat {
    long long v[N_NETSTAT]; /* -1: not in this kernel's file */
};

/* TcpExt is a pair of lines: "TcpExt: name name ..." then "TcpExt: value value ...". */
static void netstat_read(struct netstat *ns)
{
    for (size_t i = 0; i < N_NETSTAT; i++)
        ns->v[i] = -1;
    FILE *f = fopen("/proc/net/netstat", "re");
    if (!f)
        return;
    char *names = NULL, *vals = NULL, *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (strncmp(line, "TcpExt:", 7) != 0)
            continue;
        if (!names) {
            names = strdup(line);
        } else {
            vals = strdup(line);
            break;
        }
    }
    free(line);
    fclose(f);
    if (names && vals) {
        char *sn, *sv;
        char *a = strtok_r(names + 7, " \n", &sn);
        char *b = strtok_r(vals + 7, " \n", &sv);
        while (a && b) {
            for (size_t i = 0; i < N_NETSTAT; i++)
                if (strcmp(a, NETSTAT_KEYS[i]) == 0)
                    ns->v[i] = strtoll(b, NULL, 10);
            a = strtok_r(NULL, " \n", &sn);
            b = strtok_r(NULL, " \n", &sv);
        }
    }
    free(names);
    free(vals);
}

static void netstat_print(const struct netstat *a, const struct netstat *b, const char *key)
{
    printf("\"%s\": {", key);
    for (size_t i = 0; i < N_NETSTAT; i++) {
        long long v = b ? (a->v[i] >= 0 && b->v[i] >= 0 ? b->v[i] - a->v[i] : -1) : a->v[i];
        printf(i ? ", \"%s\": " : "\"%s\": ", NETSTAT_KEYS[i]);
        if (v >= 0 || (b && a->v[i] >= 0 && b->v[i] >= 0))
            printf("%lld", v);
        else
            printf("null");
    }
    printf("}");
}

struct send_flow {
    int fd;
    int broken;
    uint64_t written; /* payload bytes, the 4-byte flow index excluded */
    char cc[CA_NAME_MAX + 1];
    int lport;
};

#define TI_HAS(len, field) ((len) >= offsetof(struct tcp_info, field) + sizeof(((struct tcp_info *)0)->field))

/* One TCP_INFO row; a field beyond the length the kernel returned is written as -1. */
static void tcpinfo_row(FILE *out, int64_t t, int flow, const struct tcp_info *ti, socklen_t len)
{
#define F(field) (TI_HAS(len, field) ? (long long)ti->field : -1LL)
    fprintf(out, "%" PRId64 "\t%d\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\n",
            t, flow, F(tcpi_ca_state), F(tcpi_snd_cwnd), F(tcpi_snd_ssthresh), F(tcpi_rtt), F(tcpi_rttvar),
            F(tcpi_rto), F(tcpi_retransmits), F(tcpi_backoff), F(tcpi_lost), F(tcpi_retrans), F(tcpi_total_retrans),
            F(tcpi_unacked), F(tcpi_bytes_acked), F(tcpi_bytes_retrans), F(tcpi_dsack_dups), F(tcpi_delivery_rate),
            F(tcpi_snd_mss));
#undef F
}

static int run_send(const struct opts *o)
{
    struct sockaddr_storage probe;
    socklen_t plen;
    int fam = ct_parse_addr("--dst", o->addr, o->port, &probe, &plen);
    if (o->cc)
        check_cc(o->cc, fam);

    const int n = o->flows;
    struct send_flow *fl = calloc((size_t)n, sizeof *fl);
    int *fds = calloc((size_t)n, sizeof *fds);
    unsigned char *buf = calloc(1, (size_t)o->write_bytes);
    static struct errlog errs;
    if (!fl || !fds || !buf)
        ct_die("out of memory");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || tfd < 0)
        ct_die("epoll/timerfd: %s", strerror(errno));

    struct netstat ns0, ns1;
    netstat_read(&ns0);
    struct conn_opts co = {.cc = o->cc, .pacing_Bps = o->rate_bps / 8};
    connect_all(o, &co, fds, ep);
    for (int i = 0; i < n; i++) {
        fl[i].fd = fds[i];
        fl[i].lport = local_port(fds[i]);
        socklen_t l = sizeof fl[i].cc - 1;
        if (getsockopt(fds[i], IPPROTO_TCP, TCP_CONGESTION, fl[i].cc, &l) != 0)
            snprintf(fl[i].cc, sizeof fl[i].cc, "?");
        unsigned char hdr[BULK_HDR];
        put_le32(hdr, (uint32_t)i);
        send_preamble(fds[i], hdr, sizeof hdr, i);
        ep_ctl(ep, EPOLL_CTL_ADD, fds[i], EPOLLOUT, (uint64_t)i);
    }
    FILE *out = open_out(o->out);
    fputs("t_ns\tflow\tca_state\tcwnd\tssthresh\tsrtt_us\trttvar_us\trto_us\tretransmits\tbackoff\tlost\tretrans\t"
          "total_retrans\tunacked\tbytes_acked\tbytes_retrans\tdsack_dups\tdelivery_rate_Bps\tsnd_mss\n",
          out);
    ep_ctl(ep, EPOLL_CTL_ADD, tfd, EPOLLIN, TAG_TIMER);
    const int64_t period = (int64_t)o->sample_ms * 1000000;
    const int64_t deadline = deadline_of(o->duration_s);
    timer_set(tfd, ct_now_ns(CLOCK_MONOTONIC) + period, period);
    int64_t t_start = ct_now_ns(CLOCK_REALTIME);
    uint64_t rows = 0, missed = 0;
    socklen_t ti_len_min = sizeof(struct tcp_info);
    int ti_seen = 0;
    const char *stopped_by = "signal";
    ready();

    struct epoll_event ev[MAX_EVENTS];
    for (;;) {
        int k = ep_wait(ep, ev, -1);
        int tick = 0;
        for (int e = 0; e < k; e++) {
            uint64_t tag = ev[e].data.u64;
            if (tag == TAG_TIMER) {
                uint64_t exp = timer_read(tfd);
                if (exp > 1)
                    missed += exp - 1;
                tick = 1;
                continue;
            }
            struct send_flow *f = &fl[tag];
            if (f->broken)
                continue;
            ssize_t w = send(f->fd, buf, (size_t)o->write_bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                f->written += (uint64_t)w;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                err_add(&errs, (int)tag, "send: %s", strerror(errno));
                f->broken = 1;
                epoll_ctl(ep, EPOLL_CTL_DEL, f->fd, NULL);
            }
        }
        if (tick && !ct_stop && ct_now_ns(CLOCK_MONOTONIC) >= deadline) {
            stopped_by = "duration";
            ct_stop = 1;
        }
        if (tick || ct_stop) { /* after this round's writes; once more at the stop */
            for (int i = 0; i < n; i++) {
                struct tcp_info ti;
                memset(&ti, 0, sizeof ti);
                socklen_t len = sizeof ti;
                int64_t t = ct_now_ns(CLOCK_REALTIME);
                if (getsockopt(fl[i].fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
                    continue;
                if (!ti_seen || len < ti_len_min)
                    ti_len_min = len;
                ti_seen = 1;
                tcpinfo_row(out, t, i, &ti, len);
                rows++;
            }
            flush_out(out, o->out);
        }
        if (ct_stop)
            break;
    }
    int64_t t_end = ct_now_ns(CLOCK_REALTIME);
    netstat_read(&ns1);
    close_out(out, o->out);
    for (int i = 0; i < n; i++)
        close(fl[i].fd);
    close(tfd);
    close(ep);

    printf("{\"tool\": \"vrtcp\", \"mode\": \"send\", \"version\": 1, \"clock\": \"CLOCK_REALTIME\", \"flows\": %d, "
           "\"dst\": ",
           n);
    ct_json_str(stdout, o->addr);
    printf(", \"port\": %d, \"cc\": [", o->port);
    for (int i = 0; i < n; i++) {
        printf(i ? ", " : "");
        ct_json_str(stdout, fl[i].cc);
    }
    printf("], \"rate_bps\": %" PRIu64 ", \"sample_ms\": %d, \"write_bytes\": %ld, \"bytes_exclude_header\": true, "
           "\"bytes_written\": [",
           o->rate_bps, o->sample_ms, o->write_bytes);
    for (int i = 0; i < n; i++)
        printf(i ? ", %" PRIu64 : "%" PRIu64, fl[i].written);
    printf("], \"samples\": %" PRIu64 ", \"ticks_missed\": %" PRIu64 ", \"local_ports\": [", rows, missed);
    for (int i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", fl[i].lport);
    printf("], \"t_start_ns\": %" PRId64 ", \"t_end_ns\": %" PRId64 ", \"stopped_by\": \"%s\", ", t_start, t_end,
           stopped_by);
    netstat_print(&ns0, NULL, "netstat_start");
    printf(", ");
    netstat_print(&ns1, NULL, "netstat_end");
    printf(", ");
    netstat_print(&ns0, &ns1, "netstat_delta");
    printf(", \"tcpinfo_len\": %d, \"tcpinfo_len_header\": %zu, ", ti_seen ? (int)ti_len_min : -1,
           sizeof(struct tcp_info));
    err_print(stdout, &errs);
    printf("}\n");
    fflush(stdout);
    free(fl);
    free(fds);
    free(buf);
    return 0;
}

/* ===================== request/response: the message with an id ===================== */
/* Send bytes [off, total) of a message whose first 8 bytes are id and the rest zeros; returns
 * what send returned. */
static ssize_t send_msg_at(int fd, const unsigned char id[8], const unsigned char *zeros, size_t total, size_t off)
{
    struct iovec iov[2];
    int n = 0;
    if (off < 8) {
        iov[n++] = (struct iovec){.iov_base = (void *)(id + off), .iov_len = 8 - off};
        off = 8;
    }
    if (total > off)
        iov[n++] = (struct iovec){.iov_base = (void *)zeros, .iov_len = total - off};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    return sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ================================ rr-server ================================ */
struct srv_conn {
    int fd; /* -1: free */
    int flow;
    int req; /* request size from the preamble; 0 until read */
    unsigned char pre[RR_HDR];
    int pre_n;
    int got;              /* bytes of the current request */
    unsigned char id[8];  /* id of the current request (first 8 bytes) */
    uint64_t q[RR_PIPELINE_MAX]; /* ids of the responses to send */
    int q_head, q_n;
    size_t out_off;       /* bytes of the head response sent */
    unsigned char out_id[8];
    uint32_t events;
    struct peer peer;
};

struct srv_flow {
    int mapped;
    uint64_t requests, responses;
    struct peer peer;
    int64_t closed_ns;
};

static void srv_close(int ep, struct srv_conn *c, struct srv_flow *fl, int64_t t)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->flow >= 0)
        fl[c->flow].closed_ns = t;
}

/* Write queued responses until the socket is full; returns -1 on a broken connection. */
static int srv_flush(struct srv_conn *c, struct srv_flow *fl, const unsigned char *zeros, int resp)
{
    while (c->q_n > 0) {
        if (c->out_off == 0)
            ct_put_le64(c->out_id, c->q[c->q_head]);
        ssize_t w = send_msg_at(c->fd, c->out_id, zeros, (size_t)resp, c->out_off);
        if (w < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->out_off += (size_t)w;
        if (c->out_off == (size_t)resp) {
            c->out_off = 0;
            c->q_head = (c->q_head + 1) % RR_PIPELINE_MAX;
            c->q_n--;
            fl[c->flow].responses++;
        }
    }
    return 0;
}

/* Interest: read while the queue has room, write while it holds responses. */
static void srv_interest(int ep, struct srv_conn *c, uint64_t tag)
{
    uint32_t want = (c->q_n < RR_PIPELINE_MAX ? EPOLLIN : 0) | (c->q_n > 0 ? EPOLLOUT : 0);
    if (want != c->events) {
        ep_ctl(ep, EPOLL_CTL_MOD, c->fd, want, tag);
        c->events = want;
    }
}

static int run_rr_server(const struct opts *o)
{
    int fam;
    int lfd = listen_on(o->addr, o->port, &fam);
    const int n = o->flows;
    struct srv_conn *cs = calloc((size_t)n, sizeof *cs);
    struct srv_flow *fl = calloc((size_t)n, sizeof *fl);
    unsigned char *zeros = calloc(1, RR_BYTES_MAX);
    unsigned char *buf = malloc(RR_BYTES_MAX);
    static struct errlog errs;
    if (!cs || !fl || !zeros || !buf)
        ct_die("out of memory");
    for (int i = 0; i < n; i++)
        cs[i].fd = cs[i].flow = -1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        ct_die("epoll: %s", strerror(errno));
    ep_ctl(ep, EPOLL_CTL_ADD, lfd, EPOLLIN, TAG_LISTEN);
    const int64_t deadline = deadline_of(o->duration_s);
    int connected = 0;
    const char *stopped_by = "signal";
    ready();

    struct epoll_event ev[MAX_EVENTS];
    while (!ct_stop) {
        int timeout = -1;
        if (deadline != INT64_MAX) {
            int64_t left = deadline - ct_now_ns(CLOCK_MONOTONIC);
            if (left <= 0) {
                stopped_by = "duration";
                break;
            }
            timeout = (int)(left / 1000000) + 1;
        }
        int k = ep_wait(ep, ev, timeout);
        for (int e = 0; e < k; e++) {
            uint64_t tag = ev[e].data.u64;
            if (tag == TAG_LISTEN) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                int cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0)
                    continue;
                struct peer p;
                peer_of(&ss, &p);
                int slot = -1;
                for (int i = 0; i < n && slot < 0; i++)
                    if (cs[i].fd < 0 && !(cs[i].flow >= 0 && fl[cs[i].flow].mapped))
                        slot = i;
                if (slot < 0) {
                    err_add(&errs, -1, "connection from %s port %d beyond --flows %d: closed", p.addr, p.port, n);
                    close(cfd);
                    continue;
                }
                int one = 1;
                setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                cs[slot] = (struct srv_conn){.fd = cfd, .flow = -1, .events = EPOLLIN, .peer = p};
                ep_ctl(ep, EPOLL_CTL_ADD, cfd, EPOLLIN, (uint64_t)slot);
                continue;
            }
            struct srv_conn *c = &cs[tag];
            if (c->fd < 0)
                continue;
            int64_t t = ct_now_ns(CLOCK_REALTIME);
            if ((ev[e].events & EPOLLOUT) && c->flow >= 0 && srv_flush(c, fl, zeros, o->resp) < 0) {
                err_add(&errs, c->flow, "send: %s", strerror(errno));
                srv_close(ep, c, fl, t);
                continue;
            }
            if (!(ev[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) || c->q_n >= RR_PIPELINE_MAX) {
                srv_interest(ep, c, tag);
                continue;
            }
            /* read at most what completes the preamble or the queue's room of requests */
            size_t want = RR_BYTES_MAX;
            if (c->req == 0)
                want = (size_t)(RR_HDR - c->pre_n);
            else
                want = (size_t)(RR_PIPELINE_MAX - c->q_n) * (size_t)c->req - (size_t)c->got;
            if (want > RR_BYTES_MAX)
                want = RR_BYTES_MAX;
            ssize_t r = recv(c->fd, buf, want, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0) {
                if (r < 0)
                    err_add(&errs, c->flow, "recv: %s", strerror(errno));
                else if (c->got > 0 || c->req == 0)
                    err_add(&errs, c->flow, "connection closed within a request or its preamble");
                srv_close(ep, c, fl, t);
                continue;
            }
            size_t off = 0;
            if (c->req == 0) {
                memcpy(c->pre + c->pre_n, buf, (size_t)r);
                c->pre_n += (int)r;
                off = (size_t)r;
                if (c->pre_n < RR_HDR)
                    continue;
                uint32_t f = get_le32(c->pre), req = get_le32(c->pre + 4);
                if (f >= (uint32_t)n || fl[f].mapped || req < RR_BYTES_MIN || req > RR_BYTES_MAX) {
                    err_add(&errs, -1, "connection from %s port %d: bad preamble (flow %u, request %u bytes): closed",
                            c->peer.addr, c->peer.port, f, req);
                    srv_close(ep, c, fl, t);
                    continue;
                }
                c->flow = (int)f;
                c->req = (int)req;
                fl[f] = (struct srv_flow){.mapped = 1, .peer = c->peer, .closed_ns = -1};
                connected++;
            }
            while (off < (size_t)r) {
                size_t take = (size_t)(c->req - c->got);
                if (take > (size_t)r - off)
                    take = (size_t)r - off;
                for (size_t b = 0; b < take && c->got + (int)b < 8; b++)
                    c->id[c->got + (int)b] = buf[off + b];
                c->got += (int)take;
                off += take;
                if (c->got == c->req) {
                    c->q[(c->q_head + c->q_n) % RR_PIPELINE_MAX] = ct_get_le64(c->id);
                    c->q_n++;
                    c->got = 0;
                    fl[c->flow].requests++;
                }
            }
            if (srv_flush(c, fl, zeros, o->resp) < 0) {
                err_add(&errs, c->flow, "send: %s", strerror(errno));
                srv_close(ep, c, fl, t);
                continue;
            }
            srv_interest(ep, c, tag);
        }
    }
    for (int i = 0; i < n; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    close(lfd);
    close(ep);
    uint64_t req_total = 0, resp_total = 0;
    for (int f = 0; f < n; f++)
        req_total += fl[f].requests, resp_total += fl[f].responses;
    printf("{\"tool\": \"vrtcp\", \"mode\": \"rr-server\", \"version\": 1, \"flows\": %d, \"connected\": %d, "
           "\"resp\": %d, \"requests\": %" PRIu64 ", \"responses\": %" PRIu64 ", \"stopped_by\": \"%s\", \"peers\": [",
           n, connected, o->resp, req_total, resp_total, stopped_by);
    int first = 1;
    for (int f = 0; f < n; f++) {
        if (!fl[f].mapped)
            continue;
        printf("%s{\"flow\": %d, \"addr\": ", first ? "" : ", ", f);
        ct_json_str(stdout, fl[f].peer.addr);
        printf(", \"port\": %d, \"requests\": %" PRIu64 ", \"responses\": %" PRIu64 ", \"closed_ns\": ",
               fl[f].peer.port, fl[f].requests, fl[f].responses);
        if (fl[f].closed_ns >= 0)
            printf("%" PRId64 "}", fl[f].closed_ns);
        else
            printf("null}");
        first = 0;
    }
    printf("], ");
    err_print(stdout, &errs);
    printf("}\n");
    fflush(stdout);
    free(cs);
    free(fl);
    free(zeros);
    free(buf);
    return 0;
}

/* ================================ rr-client ================================ */
struct cli_flow {
    int fd;
    int broken;
    int busy;             /* a transaction is outstanding */
    uint64_t id;
    int64_t t_sched, t_send;
    unsigned char id_le[8];
    size_t out_off;       /* request bytes sent */
    int got;              /* response bytes received */
    unsigned char rid[8]; /* the response's first 8 bytes */
    int lport;
};

static void rr_row(FILE *out, uint64_t id, int flow, int64_t t_sched, int64_t t_send, int64_t t_done)
{
    fprintf(out, "%" PRIu64 "\t%d\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\n", id, flow, t_sched, t_send, t_done);
}

static void cli_break(int ep, struct cli_flow *f, struct errlog *errs, int flow, const char *what, int e)
{
    err_add(errs, flow, "%s: %s", what, strerror(e));
    f->broken = 1;
    epoll_ctl(ep, EPOLL_CTL_DEL, f->fd, NULL);
}

/* Keep sending the outstanding request; interest follows what is left to send. */
static void cli_push(int ep, struct cli_flow *f, int flow, const unsigned char *zeros, int req, struct errlog *errs)
{
    while (f->out_off < (size_t)req) {
        ssize_t w = send_msg_at(f->fd, f->id_le, zeros, (size_t)req, f->out_off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            cli_break(ep, f, errs, flow, "send", errno);
            return;
        }
        f->out_off += (size_t)w;
    }
    ep_ctl(ep, EPOLL_CTL_MOD, f->fd, EPOLLIN | (f->out_off < (size_t)req ? EPOLLOUT : 0), (uint64_t)flow);
}

static int run_rr_client(const struct opts *o)
{
    const int n = o->flows;
    struct cli_flow *fl = calloc((size_t)n, sizeof *fl);
    int *fds = calloc((size_t)n, sizeof *fds);
    unsigned char *zeros = calloc(1, RR_BYTES_MAX);
    unsigned char *buf = malloc(RR_BYTES_MAX);
    static struct errlog errs;
    if (!fl || !fds || !zeros || !buf)
        ct_die("out of memory");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || tfd < 0)
        ct_die("epoll/timerfd: %s", strerror(errno));
    struct conn_opts co = {.nodelay = 1};
    connect_all(o, &co, fds, ep);
    for (int i = 0; i < n; i++) {
        fl[i].fd = fds[i];
        fl[i].lport = local_port(fds[i]);
        unsigned char pre[RR_HDR];
        put_le32(pre, (uint32_t)i);
        put_le32(pre + 4, (uint32_t)o->req);
        send_preamble(fds[i], pre, sizeof pre, i);
        ep_ctl(ep, EPOLL_CTL_ADD, fds[i], EPOLLIN, (uint64_t)i);
    }
    FILE *out = open_out(o->out);
    fputs("id\tflow\tt_sched_ns\tt_send_ns\tt_done_ns\n", out);
    ep_ctl(ep, EPOLL_CTL_ADD, tfd, EPOLLIN, TAG_TIMER);

    /* transaction k is due at t0 + k * 1e9 / tps on CLOCK_MONOTONIC; its t_sched_ns is the same
     * offset from the CLOCK_REALTIME read next to t0 */
    const int64_t t0 = ct_now_ns(CLOCK_MONOTONIC);
    const int64_t rt0 = ct_now_ns(CLOCK_REALTIME);
    const int64_t dur_ns = o->duration_s > 0 ? (int64_t)llround(o->duration_s * 1e9) : INT64_MAX;
    const long double per_ns = 1e9L / (long double)o->tps;
#define SCHED_OFF(k) ((int64_t)((long double)(k) * per_ns))
    uint64_t k = 0, sent = 0, answered = 0, busy = 0, rows = 0;
    int rr_next = 0, draining = 0;
    int64_t drain_end = 0;
    const char *stopped_by = "signal";
    timer_set(tfd, t0, 0);
    ready();

    struct epoll_event ev[MAX_EVENTS];
    while (!ct_stop) {
        int m = ep_wait(ep, ev, -1);
        for (int e = 0; e < m; e++) {
            uint64_t tag = ev[e].data.u64;
            if (tag == TAG_TIMER) {
                timer_read(tfd);
                continue;
            }
            struct cli_flow *f = &fl[tag];
            if (f->broken)
                continue;
            if (ev[e].events & EPOLLOUT) {
                cli_push(ep, f, (int)tag, zeros, o->req, &errs);
                if (f->broken)
                    continue;
            }
            if (!(ev[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
                continue;
            ssize_t r = recv(f->fd, buf, RR_BYTES_MAX, 0);
            int64_t t = ct_now_ns(CLOCK_REALTIME);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0) {
                cli_break(ep, f, &errs, (int)tag, "recv", r < 0 ? errno : ECONNRESET);
                continue;
            }
            if (!f->busy || f->got + r > o->resp) {
                err_add(&errs, (int)tag, "%zd response bytes beyond the outstanding transaction: flow dropped", r);
                f->broken = 1;
                epoll_ctl(ep, EPOLL_CTL_DEL, f->fd, NULL);
                continue;
            }
            for (ssize_t b = 0; b < r && f->got + b < 8; b++)
                f->rid[f->got + b] = buf[b];
            f->got += (int)r;
            if (f->got == o->resp) {
                if (ct_get_le64(f->rid) != f->id) {
                    err_add(&errs, (int)tag, "response id %" PRIu64 " for transaction %" PRIu64 ": flow dropped",
                            ct_get_le64(f->rid), f->id);
                    f->broken = 1;
                    epoll_ctl(ep, EPOLL_CTL_DEL, f->fd, NULL);
                    continue;
                }
                rr_row(out, f->id, (int)tag, f->t_sched, f->t_send, t);
                rows++;
                answered++;
                f->busy = 0;
            }
        }
        /* dispatch every transaction due by now (at once when behind: the schedule never drifts) */
        int64_t now = ct_now_ns(CLOCK_MONOTONIC);
        while (!draining && SCHED_OFF(k) <= now - t0) {
            if (SCHED_OFF(k) >= dur_ns) {
                draining = 1;
                drain_end = now + RR_DRAIN_NS;
                break;
            }
            int idx = -1;
            for (int j = 0; j < n && idx < 0; j++) {
                int c = (rr_next + j) % n;
                if (!fl[c].broken && !fl[c].busy)
                    idx = c;
            }
            int64_t t_sched = rt0 + SCHED_OFF(k);
            if (idx < 0) {
                rr_row(out, k, -1, t_sched, -1, -1);
                rows++;
                busy++;
            } else {
                struct cli_flow *f = &fl[idx];
                rr_next = (idx + 1) % n;
                *f = (struct cli_flow){.fd = f->fd, .busy = 1, .id = k, .t_sched = t_sched, .lport = f->lport};
                ct_put_le64(f->id_le, k);
                f->t_send = ct_now_ns(CLOCK_REALTIME);
                sent++;
                cli_push(ep, f, idx, zeros, o->req, &errs);
            }
            k++;
        }
        if (draining) {
            int outstanding = 0;
            for (int j = 0; j < n; j++)
                outstanding += fl[j].busy && !fl[j].broken;
            if (outstanding == 0 || now >= drain_end) {
                stopped_by = "duration";
                break;
            }
            timer_set(tfd, drain_end, 0);
        } else {
            timer_set(tfd, t0 + SCHED_OFF(k), 0);
        }
        flush_out(out, o->out);
    }
    uint64_t outstanding = 0;
    for (int j = 0; j < n; j++)
        if (fl[j].busy) {
            rr_row(out, fl[j].id, j, fl[j].t_sched, fl[j].t_send, -1);
            rows++;
            outstanding++;
        }
    int64_t t_end = ct_now_ns(CLOCK_REALTIME);
    close_out(out, o->out);
    for (int i = 0; i < n; i++)
        close(fl[i].fd);
    close(tfd);
    close(ep);
    printf("{\"tool\": \"vrtcp\", \"mode\": \"rr-client\", \"version\": 1, \"clock\": \"CLOCK_REALTIME\", "
           "\"flows\": %d, \"dst\": ",
           n);
    ct_json_str(stdout, o->addr);
    printf(", \"port\": %d, \"rate_tps\": %.6g, \"req\": %d, \"resp\": %d, \"scheduled\": %" PRIu64
           ", \"sent\": %" PRIu64 ", \"answered\": %" PRIu64 ", \"busy\": %" PRIu64 ", \"outstanding_at_end\": %" PRIu64
           ", \"rows\": %" PRIu64 ", \"t_start_ns\": %" PRId64 ", \"t_end_ns\": %" PRId64
           ", \"stopped_by\": \"%s\", \"local_ports\": [",
           o->port, o->tps, o->req, o->resp, sent + busy, sent, answered, busy, outstanding, rows, rt0, t_end,
           stopped_by);
    for (int i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", fl[i].lport);
    printf("], ");
    err_print(stdout, &errs);
    printf("}\n");
    fflush(stdout);
    free(fl);
    free(fds);
    free(zeros);
    free(buf);
    return 0;
#undef SCHED_OFF
}

int main(int argc, char **argv)
{
    ct_prog = "vrtcp";
    struct opts o;
    parse_args(argc, argv, &o);
    /* the address is checked before anything is opened */
    struct sockaddr_storage ss;
    socklen_t sl;
    ct_parse_addr(o.mode == M_SINK || o.mode == M_RR_SERVER ? "--bind" : "--dst", o.addr, o.port, &ss, &sl);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* precise timerfd wakeups */
    setup_signals();
    setvbuf(stdout, NULL, _IOFBF, 1 << 20);
    switch (o.mode) {
    case M_SINK: return run_sink(&o);
    case M_SEND: return run_send(&o);
    case M_RR_SERVER: return run_rr_server(&o);
    case M_RR_CLIENT: return run_rr_client(&o);
    }
    return CT_EXIT_USAGE;
}
