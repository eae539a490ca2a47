/*
 * vrsampler — one process that samples the kernel's interface counters (rx/tx packets/bytes,
 * 64-bit) of interfaces in many network namespaces on an absolute periodic schedule.
 *
 *   vrsampler --period-ms 10 --out FILE [--duration S] [--rt] NS:IF1,IF2 [NS:IF ...]
 *
 * NS is a name under /run/netns, or "." for the namespace vrsampler runs in.  For every namespace
 * a NETLINK_ROUTE socket is created ONCE inside it (setns there, socket(), setns back); a netlink
 * socket stays bound to the namespace it was created in, so the sampling loop never calls setns.
 *
 * Each round (CLOCK_MONOTONIC, TIMER_ABSTIME) reads, per namespace, the 64-bit link statistics:
 * by default with one RTM_GETSTATS dump filtered to IFLA_STATS_LINK_64 (≈200 B per link — far
 * less work than RTM_GETLINK, which serialises every attribute of the link).  --method selects
 * the alternatives (per-interface RTM_GETSTATS / RTM_GETLINK requests, or an RTM_GETLINK dump)
 * for benchmarking; RTM_GETLINK is used automatically where RTM_GETSTATS is not supported.
 *
 * Output (README "counters.tsv"): a header line, a column line, then one line per sample per
 * interface:  t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes
 *   t_ns    CLOCK_REALTIME ns when that namespace's counters were read (midpoint of the netlink
 *           request and the end of its reply)
 *   late_ns how late the round woke up against its absolute schedule (CLOCK_MONOTONIC)
 * A final "# cpu_user_s=... cpu_sys_s=... rounds=... max_late_ns=..." line is appended to the file
 * and printed on stderr.  "READY" is printed on stderr after the first complete round.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSEC 1000000000LL
#define RECV_BUF_BYTES (64 * 1024)
#define SOCK_RCVBUF_BYTES (1024 * 1024)
#define OUT_BUF_BYTES (1024 * 1024)
#define FLUSH_EVERY_NS NSEC
#define RERESOLVE_EVERY_NS NSEC
#define NETNS_DIR "/run/netns/"
#define MAX_NS_NAME 200

#if defined(__SANITIZE_ADDRESS__)
#define VRS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VRS_SANITIZED 1
#endif
#endif

enum method { M_AUTO, M_STATS_DUMP, M_STATS_GET, M_LINK_GET, M_LINK_DUMP };
static const char *const method_names[] = {"auto", "stats-dump", "stats-get", "link-get", "link-dump"};

struct iface {
	char name[IF_NAMESIZE];
	int ifindex; /* 0 while absent */
	int seen;    /* got counters this round */
	uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes;
	int64_t next_resolve_ns; /* monotonic: next name lookup while absent */
};

struct nsh {
	char name[MAX_NS_NAME + 1];
	int sock;
	uint32_t seq;
	struct iface *ifs;
	int nifs;
};

static volatile sig_atomic_t g_stop;
static struct nsh *g_nss; /* freed at exit (keeps leak checkers quiet on every exit path) */
static int g_nns;
static unsigned char g_rbuf[RECV_BUF_BYTES] __attribute__((aligned(NLMSG_ALIGNTO * 2)));
static enum method g_method = M_AUTO;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	logmsg("vrsampler: %s", buf);
	exit(1);
}

static int64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * NSEC + ts.tv_nsec;
}

static struct timespec to_ts(int64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / NSEC), .tv_nsec = (long)(ns % NSEC)};
	return ts;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vrsampler --period-ms MS --out FILE [--duration S] [--rt] [--rt-prio N]\n"
		"                 [--method auto|stats-dump|stats-get|link-get|link-dump] NS:IF1,IF2 [NS:IF ...]\n"
		"  NS is a name under " NETNS_DIR " or '.' for the current namespace.\n"
		"  Samples rx/tx packets/bytes every MS milliseconds into FILE (README counters.tsv);\n"
		"  prints READY on stderr after the first round; stops on SIGINT/SIGTERM or after S seconds.\n");
}

/* ---------------------------------------------------------------- netlink -- */

static int nl_socket_here(void)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (s < 0)
		return -1;
	int rcv = SOCK_RCVBUF_BYTES;
	(void)setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	struct timeval tv = {.tv_sec = 1, .tv_usec = 0}; /* safety net: netlink replies are immediate */
	(void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

/* Create a NETLINK_ROUTE socket inside namespace `name` and come back to `orig_fd`. */
static int nl_socket_in(const char *name, int orig_fd)
{
	if (strcmp(name, ".") == 0) {
		int s = nl_socket_here();
		if (s < 0)
			die("netlink socket: %s", strerror(errno));
		return s;
	}
	char path[sizeof NETNS_DIR + MAX_NS_NAME + 1];
	snprintf(path, sizeof path, NETNS_DIR "%s", name);
	int nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0)
		die("namespace %s: cannot open %s: %s", name, path, strerror(errno));
	if (setns(nsfd, CLONE_NEWNET) < 0)
		die("namespace %s: setns: %s", name, strerror(errno));
	int s = nl_socket_here();
	int e = errno;
	if (setns(orig_fd, CLONE_NEWNET) < 0)
		die("cannot return to the original namespace: %s", strerror(errno));
	close(nsfd);
	if (s < 0)
		die("namespace %s: netlink socket: %s", name, strerror(e));
	return s;
}

struct req_buf {
	unsigned char b[8192] __attribute__((aligned(NLMSG_ALIGNTO * 2)));
	size_t len;
};

static void *req_put(struct req_buf *r, size_t n)
{
	size_t al = NLMSG_ALIGN(n);
	if (r->len + al > sizeof r->b)
		die("request buffer overflow");
	void *p = r->b + r->len;
	memset(p, 0, al);
	r->len += al;
	return p;
}

/* Append one request: nlmsghdr + fixed header (ifinfomsg or if_stats_msg), optional IFLA_IFNAME. */
static struct nlmsghdr *req_msg(struct req_buf *r, uint16_t type, uint16_t flags, uint32_t seq, int ifindex,
				const char *ifname)
{
	size_t start = r->len;
	struct nlmsghdr *h = req_put(r, sizeof *h);
	h->nlmsg_type = type;
	h->nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
	h->nlmsg_seq = seq;
	if (type == RTM_GETSTATS) {
		struct if_stats_msg *m = req_put(r, sizeof *m);
		m->family = AF_UNSPEC;
		m->ifindex = (uint32_t)ifindex;
		m->filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64);
	} else {
		struct ifinfomsg *m = req_put(r, sizeof *m);
		m->ifi_family = AF_UNSPEC;
		m->ifi_index = ifindex;
		if (ifname) {
			size_t n = strlen(ifname) + 1;
			struct rtattr *a = req_put(r, RTA_LENGTH(n));
			a->rta_type = IFLA_IFNAME;
			a->rta_len = (unsigned short)RTA_LENGTH(n);
			memcpy(RTA_DATA(a), ifname, n);
		}
	}
	h = (struct nlmsghdr *)(r->b + start);
	h->nlmsg_len = (uint32_t)(r->len - start);
	return h;
}

static int nl_send(int sock, const struct req_buf *r)
{
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	ssize_t n = sendto(sock, r->b, r->len, 0, (struct sockaddr *)&sa, sizeof sa);
	return (n == (ssize_t)r->len) ? 0 : -1;
}

/* The ifindex of both fixed headers parse_stats reads is a 32-bit integer: one read serves both. */
_Static_assert(sizeof(((struct if_stats_msg *)0)->ifindex) == sizeof(int32_t), "if_stats_msg.ifindex");
_Static_assert(sizeof(((struct ifinfomsg *)0)->ifi_index) == sizeof(int32_t), "ifinfomsg.ifi_index");

/* Extract ifindex and the 64-bit counters from an RTM_NEWSTATS or RTM_NEWLINK message. */
static int parse_stats(const struct nlmsghdr *h, int *ifindex, struct rtnl_link_stats64 *st)
{
	const unsigned char *p;
	/* the fixed header's length, its ifindex's offset and the attribute that holds the counters */
	size_t hdr, at, len = h->nlmsg_len;
	unsigned short want;
	if (h->nlmsg_type == RTM_NEWSTATS) {
		hdr = NLMSG_ALIGN(sizeof(struct if_stats_msg));
		at = offsetof(struct if_stats_msg, ifindex);
		want = IFLA_STATS_LINK_64;
	} else if (h->nlmsg_type == RTM_NEWLINK) {
		hdr = NLMSG_ALIGN(sizeof(struct ifinfomsg));
		at = offsetof(struct ifinfomsg, ifi_index);
		want = IFLA_STATS64;
	} else {
		return -1;
	}
	if (len < NLMSG_LENGTH(hdr))
		return -1;
	int32_t idx;
	memcpy(&idx, (const unsigned char *)NLMSG_DATA(h) + at, sizeof idx);
	*ifindex = idx;
	p = (const unsigned char *)NLMSG_DATA(h) + hdr;
	size_t rem = len - NLMSG_LENGTH(hdr);
	while (rem >= sizeof(struct rtattr)) {
		struct rtattr a;
		memcpy(&a, p, sizeof a);
		if (a.rta_len < sizeof a || a.rta_len > rem)
			return -1;
		if ((a.rta_type & NLA_TYPE_MASK) == want) {
			size_t n = a.rta_len - RTA_LENGTH(0);
			memset(st, 0, sizeof *st);
			memcpy(st, p + RTA_LENGTH(0), n < sizeof *st ? n : sizeof *st);
			return 0;
		}
		size_t step = RTA_ALIGN(a.rta_len);
		if (step >= rem)
			break;
		p += step;
		rem -= step;
	}
	return -1;
}

static struct iface *find_if(struct nsh *ns, int ifindex)
{
	for (int i = 0; i < ns->nifs; i++)
		if (ns->ifs[i].ifindex == ifindex && ifindex > 0)
			return &ns->ifs[i];
	return NULL;
}

static void store(struct iface *f, const struct rtnl_link_stats64 *st)
{
	f->rx_packets = st->rx_packets;
	f->rx_bytes = st->rx_bytes;
	f->tx_packets = st->tx_packets;
	f->tx_bytes = st->tx_bytes;
	f->seen = 1;
}

/* One netlink datagram into g_rbuf, retried on EINTR: its length, or -errno (-EMSGSIZE if it was
 * larger than g_rbuf). */
static ssize_t nl_recv(int sock)
{
	for (;;) {
		ssize_t n = recv(sock, g_rbuf, sizeof g_rbuf, MSG_TRUNC);
		if (n >= 0)
			return (size_t)n > sizeof g_rbuf ? -EMSGSIZE : n;
		if (errno != EINTR)
			return -errno;
	}
}

/* The error code an NLMSG_ERROR message carries (0: an acknowledgement). */
static int nl_error(const struct nlmsghdr *h)
{
	struct nlmsgerr e;
	memcpy(&e, NLMSG_DATA(h), sizeof e);
	return e.error;
}

/*
 * Receive replies for requests with sequence numbers [seq0, seq0+nreq).  For dumps, nreq == 1
 * and the loop ends at NLMSG_DONE; for gets, each request ends with one reply or one error.
 * Per-request errors are stored in errs[] (0 = reply seen); returns -errno on socket failure.
 */
static int nl_collect(struct nsh *ns, uint32_t seq0, int nreq, int dump, int *errs)
{
	int pending = nreq;
	for (int i = 0; i < nreq; i++)
		errs[i] = 1; /* no answer yet */
	while (pending > 0) {
		ssize_t n = nl_recv(ns->sock);
		if (n < 0)
			return (int)n;
		size_t rem = (size_t)n;
		for (struct nlmsghdr *h = (struct nlmsghdr *)g_rbuf; NLMSG_OK(h, rem); h = NLMSG_NEXT(h, rem)) {
			uint32_t k = h->nlmsg_seq - seq0;
			if (k >= (uint32_t)nreq)
				continue; /* stale reply from an earlier, abandoned round */
			if (h->nlmsg_type == NLMSG_ERROR) {
				int err = nl_error(h);
				if (errs[k] == 1 || err != 0) {
					errs[k] = err;
					pending--;
				}
				continue;
			}
			if (h->nlmsg_type == NLMSG_DONE) {
				if (errs[k] == 1) {
					int err = 0;
					if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int)))
						memcpy(&err, NLMSG_DATA(h), sizeof err);
					errs[k] = err;
					pending--;
				}
				continue;
			}
			int ifindex;
			struct rtnl_link_stats64 st;
			if (parse_stats(h, &ifindex, &st) == 0) {
				struct iface *f = find_if(ns, ifindex);
				if (f)
					store(f, &st);
			}
			if (!dump && errs[k] == 1) {
				errs[k] = 0;
				pending--;
			}
		}
	}
	return 0;
}

/* ifindex of `name` in the namespace, 0 if absent, -errno on other failures. */
static int resolve_ifindex(struct nsh *ns, const char *name)
{
	struct req_buf r = {.len = 0};
	uint32_t seq = ++ns->seq;
	req_msg(&r, RTM_GETLINK, 0, seq, 0, name);
	/* ask for a small reply: no stats, no VF info */
	struct rtattr *a = req_put(&r, RTA_LENGTH(sizeof(uint32_t)));
	a->rta_type = IFLA_EXT_MASK;
	a->rta_len = RTA_LENGTH(sizeof(uint32_t));
	uint32_t mask = RTEXT_FILTER_SKIP_STATS;
	memcpy(RTA_DATA(a), &mask, sizeof mask);
	((struct nlmsghdr *)r.b)->nlmsg_len = (uint32_t)r.len;
	if (nl_send(ns->sock, &r) < 0)
		return -errno;
	for (;;) {
		ssize_t n = nl_recv(ns->sock);
		if (n < 0)
			return (int)n;
		size_t rem = (size_t)n;
		for (struct nlmsghdr *h = (struct nlmsghdr *)g_rbuf; NLMSG_OK(h, rem); h = NLMSG_NEXT(h, rem)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				int err = nl_error(h);
				return (err == -ENODEV || err == 0) ? 0 : err;
			}
			if (h->nlmsg_type == RTM_NEWLINK) {
				struct ifinfomsg m;
				memcpy(&m, NLMSG_DATA(h), sizeof m);
				return m.ifi_index;
			}
		}
	}
}

/* Read the counters of every present listed interface of one namespace. Returns 0 or -errno. */
static int read_ns(struct nsh *ns)
{
	static struct req_buf r;
	int errs[64];
	r.len = 0;
	for (int i = 0; i < ns->nifs; i++)
		ns->ifs[i].seen = 0;
	if (g_method == M_STATS_DUMP || g_method == M_LINK_DUMP) {
		uint32_t seq = ++ns->seq;
		if (g_method == M_STATS_DUMP)
			req_msg(&r, RTM_GETSTATS, NLM_F_DUMP, seq, 0, NULL);
		else
			req_msg(&r, RTM_GETLINK, NLM_F_DUMP, seq, 0, NULL);
		if (nl_send(ns->sock, &r) < 0)
			return -errno;
		int rc = nl_collect(ns, seq, 1, 1, errs);
		if (rc < 0)
			return rc;
		return errs[0] < 0 ? errs[0] : 0;
	}
	/* one request per present interface, all in a single sendto() */
	uint32_t seq0 = ns->seq + 1;
	int nreq = 0;
	for (int i = 0; i < ns->nifs && nreq < 64; i++) {
		if (ns->ifs[i].ifindex <= 0)
			continue;
		req_msg(&r, g_method == M_STATS_GET ? RTM_GETSTATS : RTM_GETLINK, 0, seq0 + (uint32_t)nreq,
			ns->ifs[i].ifindex, NULL);
		nreq++;
	}
	ns->seq += (uint32_t)nreq;
	if (nreq == 0)
		return 0;
	if (nl_send(ns->sock, &r) < 0)
		return -errno;
	int rc = nl_collect(ns, seq0, nreq, 0, errs);
	if (rc < 0)
		return rc;
	for (int k = 0; k < nreq; k++)
		if (errs[k] < 0 && errs[k] != -ENODEV)
			return errs[k];
	return 0;
}

/* ------------------------------------------------------------------ args -- */

static void parse_target(const char *arg, struct nsh *ns)
{
	const char *colon = strrchr(arg, ':');
	if (!colon || colon == arg || colon[1] == '\0') {
		logmsg("vrsampler: bad target %s (want NS:IF1,IF2)", arg);
		exit(2);
	}
	size_t nl = (size_t)(colon - arg);
	if (nl > MAX_NS_NAME) {
		logmsg("vrsampler: namespace name too long in %s", arg);
		exit(2);
	}
	memcpy(ns->name, arg, nl);
	ns->name[nl] = '\0';
	if (strchr(ns->name, '/') || strpbrk(ns->name, " \t\n") || strcmp(ns->name, "..") == 0) {
		logmsg("vrsampler: bad namespace name %s", ns->name);
		exit(2);
	}
	char *list = strdup(colon + 1);
	if (!list)
		die("out of memory");
	int cap = 1;
	for (const char *c = list; *c; c++)
		cap += (*c == ',');
	if (cap > 64) {
		logmsg("vrsampler: at most 64 interfaces per namespace");
		exit(2);
	}
	ns->ifs = calloc((size_t)cap, sizeof *ns->ifs);
	if (!ns->ifs)
		die("out of memory");
	char *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (strlen(tok) >= IF_NAMESIZE || strpbrk(tok, " \t\n/")) {
			logmsg("vrsampler: bad interface name %s", tok);
			exit(2);
		}
		for (int i = 0; i < ns->nifs; i++)
			if (strcmp(ns->ifs[i].name, tok) == 0) {
				logmsg("vrsampler: interface %s listed twice for %s", tok, ns->name);
				exit(2);
			}
		snprintf(ns->ifs[ns->nifs].name, IF_NAMESIZE, "%s", tok);
		ns->nifs++;
	}
	free(list);
	if (ns->nifs == 0) {
		logmsg("vrsampler: no interface in %s", arg);
		exit(2);
	}
}

static int set_rt(int prio)
{
	int ok = 1;
	struct sched_param sp = {.sched_priority = prio};
	if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) {
		logmsg("vrsampler: --rt: SCHED_FIFO not permitted (%s); continuing with normal scheduling",
		       strerror(errno));
		ok = 0;
	}
#ifdef VRS_SANITIZED
	logmsg("vrsampler: --rt: sanitizer build, mlockall skipped");
#else
	if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
		logmsg("vrsampler: --rt: mlockall not permitted (%s); continuing", strerror(errno));
		ok = 0;
	}
#endif
	return ok;
}

/* Time this thread spent on a CPU (ns), from the scheduler's own accounting: exact, unlike
 * getrusage(), which on tick-based kernels is sampled.  -1 if unavailable. */
static int64_t sched_cpu_ns(void)
{
	long long ns = -1;
	FILE *f = fopen("/proc/self/schedstat", "r");
	if (f) {
		if (fscanf(f, "%lld", &ns) != 1)
			ns = -1;
		fclose(f);
	}
	return (int64_t)ns;
}

static void free_all(void)
{
	for (int i = 0; i < g_nns; i++) {
		if (g_nss[i].sock > 0)
			close(g_nss[i].sock);
		free(g_nss[i].ifs);
	}
	free(g_nss);
	g_nss = NULL;
	g_nns = 0;
}

/* ------------------------------------------------------------------ main -- */

int main(int argc, char **argv)
{
	double period_ms = 0, duration_s = 0;
	const char *out_path = NULL;
	int rt = 0, rt_prio = 50;
	static const struct option opts[] = {
		{"period-ms", required_argument, NULL, 'p'}, {"out", required_argument, NULL, 'o'},
		{"duration", required_argument, NULL, 'd'},  {"rt", no_argument, NULL, 'r'},
		{"rt-prio", required_argument, NULL, 'P'},   {"method", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},	     {NULL, 0, NULL, 0},
	};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "+p:o:d:rh", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			period_ms = strtod(optarg, &end);
			if (*end || !(period_ms >= 0.1 && period_ms <= 60000)) {
				logmsg("vrsampler: --period-ms must be in [0.1, 60000]");
				return 2;
			}
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'd':
			duration_s = strtod(optarg, &end);
			if (*end || !(duration_s > 0 && duration_s < 1e7)) {
				logmsg("vrsampler: --duration must be > 0 seconds");
				return 2;
			}
			break;
		case 'r':
			rt = 1;
			break;
		case 'P':
			rt_prio = (int)strtol(optarg, &end, 10);
			if (*end || rt_prio < 1 || rt_prio > 99) {
				logmsg("vrsampler: --rt-prio must be 1..99");
				return 2;
			}
			break;
		case 'm': {
			int found = 0;
			for (int i = 0; i < (int)(sizeof method_names / sizeof *method_names); i++)
				if (strcmp(optarg, method_names[i]) == 0) {
					g_method = (enum method)i;
					found = 1;
				}
			if (!found) {
				logmsg("vrsampler: unknown --method %s", optarg);
				return 2;
			}
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (period_ms <= 0 || !out_path || optind >= argc) {
		usage(stderr);
		return 2;
	}
	const int64_t period_ns = llround(period_ms * 1e6);
	const int nns = argc - optind;
	struct nsh *nss = calloc((size_t)nns, sizeof *nss);
	if (!nss)
		die("out of memory");
	g_nss = nss;
	g_nns = nns;
	atexit(free_all);
	for (int i = 0; i < nns; i++) {
		parse_target(argv[optind + i], &nss[i]);
		for (int j = 0; j < i; j++)
			if (strcmp(nss[i].name, nss[j].name) == 0) {
				logmsg("vrsampler: namespace %s given twice (list its interfaces once: NS:IF1,IF2)",
				       nss[i].name);
				return 2;
			}
	}

	/* Open every namespace once. */
	int orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (orig < 0)
		die("open /proc/self/ns/net: %s", strerror(errno));
	for (int i = 0; i < nns; i++)
		nss[i].sock = nl_socket_in(nss[i].name, orig);
	close(orig);

	/* Resolve the interfaces; all must exist at start (a typo must not go unnoticed). */
	int missing = 0;
	for (int i = 0; i < nns; i++)
		for (int j = 0; j < nss[i].nifs; j++) {
			int ix = resolve_ifindex(&nss[i], nss[i].ifs[j].name);
			if (ix <= 0) {
				logmsg("vrsampler: %s: no interface %s%s%s", nss[i].name, nss[i].ifs[j].name,
				       ix < 0 ? ": " : "", ix < 0 ? strerror(-ix) : "");
				missing = 1;
			}
			nss[i].ifs[j].ifindex = ix;
		}
	if (missing)
		return 1;

	/* RTM_GETSTATS exists since Linux 4.7; fall back to per-interface RTM_GETLINK without it. */
	if (g_method == M_AUTO) {
		g_method = M_STATS_DUMP;
		if (read_ns(&nss[0]) < 0) {
			g_method = M_LINK_GET;
			logmsg("vrsampler: RTM_GETSTATS unsupported, using RTM_GETLINK");
		}
	}

	FILE *out = fopen(out_path, "w");
	if (!out)
		die("%s: %s", out_path, strerror(errno));
	static char obuf[OUT_BUF_BYTES];
	setvbuf(out, obuf, _IOFBF, sizeof obuf);
	fprintf(out, "# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns=%" PRId64 "\n", period_ns);
	fprintf(out, "t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes\n");
	if (fflush(out) != 0)
		die("%s: %s", out_path, strerror(errno));

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal; /* no SA_RESTART: clock_nanosleep returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (rt)
		set_rt(rt_prio);
	else
		(void)prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* normal tasks: 50 us slack by default */

	/* Schedule rounds on multiples of the period in CLOCK_REALTIME terms (nicer to merge runs),
	 * kept on CLOCK_MONOTONIC so a clock step cannot disturb the sampling. */
	int64_t mono0 = now_ns(CLOCK_MONOTONIC), real0 = now_ns(CLOCK_REALTIME);
	int64_t off = real0 - mono0;
	int64_t first_real = (real0 / period_ns + 2) * period_ns;
	int64_t sched = first_real - off;
	const int64_t end_mono = duration_s > 0 ? mono0 + llround(duration_s * 1e9) : INT64_MAX;

	uint64_t rounds = 0, missed = 0, samples = 0, read_errors = 0;
	int64_t max_late = 0, max_read = 0, last_flush = mono0;
	int ready = 0, write_failed = 0;

	while (!g_stop && sched <= end_mono) {
		struct timespec ts = to_ts(sched);
		int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		if (rc == EINTR)
			continue; /* g_stop re-checked by the loop */
		if (rc != 0)
			die("clock_nanosleep: %s", strerror(rc));
		int64_t woke = now_ns(CLOCK_MONOTONIC);
		int64_t late = woke - sched;
		if (late > max_late)
			max_late = late;

		for (int i = 0; i < nns; i++) {
			struct nsh *ns = &nss[i];
			int64_t t0 = now_ns(CLOCK_REALTIME);
			int err = read_ns(ns);
			int64_t t1 = now_ns(CLOCK_REALTIME);
			if (t1 - t0 > max_read)
				max_read = t1 - t0;
			if (err < 0) {
				if (read_errors++ < 10)
					logmsg("vrsampler: %s: read failed: %s", ns->name, strerror(-err));
				continue;
			}
			int64_t t = t0 + (t1 - t0) / 2;
			for (int j = 0; j < ns->nifs; j++) {
				struct iface *f = &ns->ifs[j];
				if (f->seen) {
					fprintf(out, "%" PRId64 " %" PRId64 " %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
						t, late, ns->name, f->name, f->rx_packets, f->rx_bytes, f->tx_packets,
						f->tx_bytes);
					samples++;
				} else if (f->ifindex > 0) {
					/* not in the reply: gone, re-created (new ifindex), or a dump that the
					 * kernel cut short while links changed (then it is still there) */
					int ix = resolve_ifindex(ns, f->name);
					if (ix == f->ifindex)
						continue; /* still there: no sample this round */
					logmsg("vrsampler: %s: interface %s disappeared; skipping it", ns->name, f->name);
					f->ifindex = 0;
					f->next_resolve_ns = woke + RERESOLVE_EVERY_NS;
					if (ix > 0) {
						f->ifindex = ix;
						logmsg("vrsampler: %s: interface %s is back (ifindex %d)", ns->name,
						       f->name, ix);
					}
				} else if (woke >= f->next_resolve_ns) {
					int ix = resolve_ifindex(ns, f->name);
					f->next_resolve_ns = woke + RERESOLVE_EVERY_NS;
					if (ix > 0) {
						f->ifindex = ix;
						logmsg("vrsampler: %s: interface %s is back (ifindex %d)", ns->name,
						       f->name, ix);
					}
				}
			}
		}
		rounds++;
		if (!ready) {
			ready = 1;
			logmsg("READY");
		}
		int64_t done = now_ns(CLOCK_MONOTONIC);
		if (done - last_flush >= FLUSH_EVERY_NS) {
			if (fflush(out) != 0 && !write_failed) {
				write_failed = 1;
				logmsg("vrsampler: writing %s: %s", out_path, strerror(errno));
			}
			last_flush = done;
		}
		/* Next round on the grid, after now: a late round is not caught up with a burst of
		 * back-to-back reads; the grid points that passed meanwhile are counted as missed. */
		sched += period_ns;
		if (done >= sched) {
			int64_t skip = (done - sched) / period_ns + 1;
			missed += (uint64_t)skip;
			sched += skip * period_ns;
		}
	}

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double wall_s = (double)(now_ns(CLOCK_MONOTONIC) - mono0) / 1e9;
	int64_t cpu_ns = sched_cpu_ns();
	char tail[400];
	snprintf(tail, sizeof tail,
		 "# cpu_user_s=%.6f cpu_sys_s=%.6f cpu_sched_ns=%" PRId64 " wall_s=%.3f rounds=%" PRIu64 " missed=%" PRIu64
		 " samples=%" PRIu64 " max_late_ns=%" PRId64 " max_read_ns=%" PRId64 " read_errors=%" PRIu64
		 " method=%s rt=%d",
		 (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
		 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6, cpu_ns, wall_s, rounds, missed, samples,
		 max_late, max_read, read_errors, method_names[g_method], rt);
	fprintf(out, "%s\n", tail);
	int bad = (fflush(out) != 0) | (fclose(out) != 0) | write_failed;
	logmsg("%s", tail);
	if (bad) {
		logmsg("vrsampler: writing %s failed", out_path);
		return 1;
	}
	return 0;
}
