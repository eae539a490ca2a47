/* vrgen --packet: whole Ethernet frames (Ethernet, IPv4/IPv6, UDP headers and checksums) built
 * once, sent through an AF_PACKET socket with PACKET_QDISC_BYPASS.  Per packet only the payload
 * header (u64 seq, i64 send ns) and the UDP checksum change; the checksum is updated from a
 * precomputed partial sum, so every frame on the wire is a valid UDP datagram. */
#ifndef VRMIG_CT_PKTFRAME_H
#define VRMIG_CT_PKTFRAME_H

#include "common.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif

struct pktframe {
    int fd;            /* AF_PACKET socket bound to the interface */
    int udp_fd;        /* connected UDP socket: source address/port (kept open to reserve the port) */
    int len;           /* frame bytes without FCS = --frame - 4 */
    int payload_off;   /* offset of the UDP payload in the frame */
    int csum_off;      /* offset of the UDP checksum */
    uint32_t csum_base; /* ones-complement sum of pseudo header + UDP header + payload with zero seq/ts */
    unsigned char tmpl[CT_FRAME_MAX];
    unsigned char src_mac[6], dst_mac[6];
    char src_addr[INET6_ADDRSTRLEN];
    int src_port;
};

static inline uint32_t pf_sum16(const unsigned char *p, size_t n, uint32_t sum)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (n & 1)
        sum += (uint32_t)(p[n - 1] << 8);
    return sum;
}

static inline uint16_t pf_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* "aa:bb:cc:dd:ee:ff" -> 6 bytes; exits 2 on bad input. */
static inline void pf_parse_mac(const char *opt, const char *s, unsigned char mac[6])
{
    unsigned v[6];
    char tail;
    if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        ct_usage_error("%s: '%s' is not a MAC address like 02:00:00:00:00:01", opt, s);
    for (int i = 0; i < 6; i++) {
        if (v[i] > 255)
            ct_usage_error("%s: '%s' is not a MAC address like 02:00:00:00:00:01", opt, s);
        mac[i] = (unsigned char)v[i];
    }
}

/* Open the packet socket on ifname and build the frame template for dst (already resolved to
 * *dstsa); the source address and port come from a UDP socket connected to dst. */
static inline void pf_open(struct pktframe *pf, const char *ifname, const unsigned char dst_mac[6],
                           const struct sockaddr_storage *dstsa, socklen_t dstlen, int frame, int sndbuf)
{
    int fam = dstsa->ss_family;
    memcpy(pf->dst_mac, dst_mac, 6);
    pf->len = frame - 4;

    pf->udp_fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (pf->udp_fd < 0 || connect(pf->udp_fd, (const struct sockaddr *)dstsa, dstlen) != 0)
        ct_die("--packet: no route to the destination: %s", strerror(errno));
    struct sockaddr_storage src;
    socklen_t srclen = sizeof src;
    if (getsockname(pf->udp_fd, (struct sockaddr *)&src, &srclen) != 0)
        ct_die("--packet: getsockname: %s", strerror(errno));

    unsigned ifindex = if_nametoindex(ifname);
    if (ifindex == 0)
        ct_usage_error("--packet %s: no such interface", ifname);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    if (ioctl(pf->udp_fd, SIOCGIFHWADDR, &ifr) != 0 || ifr.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */)
        ct_usage_error("--packet %s: not an Ethernet interface", ifname);
    memcpy(pf->src_mac, ifr.ifr_hwaddr.sa_data, 6);
    if (ioctl(pf->udp_fd, SIOCGIFMTU, &ifr) == 0 && pf->len - 14 > ifr.ifr_mtu)
        ct_usage_error("--frame %d exceeds the MTU %d of %s", frame, ifr.ifr_mtu, ifname);

    pf->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0); /* protocol 0: never receives */
    if (pf->fd < 0)
        ct_die("--packet: AF_PACKET socket: %s (needs CAP_NET_RAW)", strerror(errno));
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = 0, .sll_ifindex = (int)ifindex};
    if (bind(pf->fd, (struct sockaddr *)&ll, sizeof ll) != 0)
        ct_die("--packet %s: bind: %s", ifname, strerror(errno));
    int one = 1;
    if (setsockopt(pf->fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0)
        ct_die("--packet: PACKET_QDISC_BYPASS: %s", strerror(errno));
    if (setsockopt(pf->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
        setsockopt(pf->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);

    unsigned char *f = pf->tmpl;
    memset(f, 0, sizeof pf->tmpl);
    memcpy(f, pf->dst_mac, 6);
    memcpy(f + 6, pf->src_mac, 6);
    uint32_t pseudo = 0;
    int l3 = 14, udp;
    uint16_t dport, sport;
    if (fam == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)&src, *d4 = (const void *)dstsa;
        f[12] = 0x08, f[13] = 0x00;
        unsigned char *ip = f + l3;
        int tot = pf->len - 14;
        ip[0] = 0x45;
        ip[2] = (unsigned char)(tot >> 8), ip[3] = (unsigned char)tot;
        ip[6] = 0x40; /* DF, id 0 (RFC 6864) */
        ip[8] = 64, ip[9] = IPPROTO_UDP;
        memcpy(ip + 12, &s4->sin_addr, 4);
        memcpy(ip + 16, &d4->sin_addr, 4);
        uint16_t c = (uint16_t)~pf_fold(pf_sum16(ip, 20, 0));
        ip[10] = (unsigned char)(c >> 8), ip[11] = (unsigned char)c;
        pseudo = pf_sum16(ip + 12, 8, 0) + IPPROTO_UDP + (uint32_t)(tot - 20);
        udp = l3 + 20;
        sport = s4->sin_port, dport = d4->sin_port;
        inet_ntop(AF_INET, &s4->sin_addr, pf->src_addr, sizeof pf->src_addr);
    } else {
        const struct sockaddr_in6 *s6 = (const void *)&src, *d6 = (const void *)dstsa;
        f[12] = 0x86, f[13] = 0xdd;
        unsigned char *ip = f + l3;
        int plen = pf->len - 14 - 40;
        ip[0] = 0x60;
        ip[4] = (unsigned char)(plen >> 8), ip[5] = (unsigned char)plen;
        ip[6] = IPPROTO_UDP, ip[7] = 64;
        memcpy(ip + 8, &s6->sin6_addr, 16);
        memcpy(ip + 24, &d6->sin6_addr, 16);
        pseudo = pf_sum16(ip + 8, 32, 0) + IPPROTO_UDP + (uint32_t)plen;
        udp = l3 + 40;
        sport = s6->sin6_port, dport = d6->sin6_port;
        inet_ntop(AF_INET6, &s6->sin6_addr, pf->src_addr, sizeof pf->src_addr);
    }
    int ulen = pf->len - udp;
    memcpy(f + udp, &sport, 2); /* already network order */
    memcpy(f + udp + 2, &dport, 2);
    f[udp + 4] = (unsigned char)(ulen >> 8), f[udp + 5] = (unsigned char)ulen;
    pf->src_port = ntohs(sport);
    pf->payload_off = udp + 8;
    pf->csum_off = udp + 6;
    pf->csum_base = pseudo + pf_sum16(f + udp, (size_t)ulen, 0); /* checksum field and seq/ts are 0 here */
}

/* Fill one frame (a copy of the template) with its payload header and UDP checksum. */
static inline void pf_stamp(const struct pktframe *pf, unsigned char *frame, uint64_t seq, int64_t ts)
{
    unsigned char *p = frame + pf->payload_off;
    ct_put_le64(p, seq);
    ct_put_le64(p + 8, (uint64_t)ts);
    uint16_t c = (uint16_t)~pf_fold(pf_sum16(p, CT_HDR_BYTES, pf->csum_base));
    if (c == 0)
        c = 0xffff; /* 0 means "no checksum" in UDP */
    frame[pf->csum_off] = (unsigned char)(c >> 8);
    frame[pf->csum_off + 1] = (unsigned char)c;
}

#endif
