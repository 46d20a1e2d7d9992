package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Where push deliveries may go. A webhook's URL is checked when it is
// registered (checkURL, and its host resolved: resolveCheck) and again at
// every delivery: the transport resolves the host itself (urlPolicy.dial),
// dials only the addresses the policy allows, and follows no redirect. A
// host that resolved to a public address at registration and to a private
// one now (DNS rebinding) is refused now.

// urlPolicy is PushOptions' say on where deliveries may go.
type urlPolicy struct {
	allowHTTP, allowPrivate, denyLoopback bool
	// lookup resolves a host name; nil means net.DefaultResolver (tests
	// swap it).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

func (o PushOptions) policy() urlPolicy {
	return urlPolicy{allowHTTP: o.AllowHTTP, allowPrivate: o.AllowPrivate, denyLoopback: o.DenyLoopback}
}

// errAddress reports a delivery address the policy refuses.
var errAddress = errors.New("address not allowed")

// ranges the policy treats as private (PushOptions.AllowPrivate lets them
// through): RFC 1918, shared address space, link-local, unique local,
// benchmarking, the IETF and documentation ranges, this network, and the
// local-use NAT64 prefix.
var privateRanges = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
		"203.0.113.0/24", "240.0.0.0/4",
		"fc00::/7", "fe80::/10", "2001:db8::/32", "100::/64", "64:ff9b:1::/48",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// IPv6 forms of IPv4 addresses. The well-known NAT64 prefix (RFC 6052)
// reaches the IPv4 address in its last 32 bits, and a 6to4 address (RFC
// 3056) the one in its bits 16 to 47: that address is what is checked.
// The local-use NAT64 prefix (RFC 8215) is a network's own, whose
// translator puts the IPv4 address where that network chose: it is
// refused as a private range (privateRanges).
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// embedded returns the IPv4 address an IPv6 address reaches through a
// translator (NAT64, 6to4), and whether it is one; an IPv4-mapped address
// is the IPv4 address itself.
func embedded(ip netip.Addr) (netip.Addr, bool) {
	ip = ip.Unmap()
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixTo4.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return ip, false
}

// allowed says whether a delivery may connect to ip; loopbackOnly is set
// for an http:// URL without AllowHTTP. A translated address is judged by
// the IPv4 address it reaches, except that it is never loopback (the
// translator is not this host).
func (p urlPolicy) allowed(ip netip.Addr, loopbackOnly bool) error {
	ip, translated := embedded(ip)
	if translated && ip.IsLoopback() {
		return fmt.Errorf("%w: %s reaches a loopback address through a translator", errAddress, ip)
	}
	switch {
	case !ip.IsValid():
		return fmt.Errorf("%w: invalid address", errAddress)
	case ip.IsLoopback():
		if p.denyLoopback {
			return fmt.Errorf("%w: %s is a loopback address (PushOptions.DenyLoopback)", errAddress, ip)
		}
		return nil
	case loopbackOnly:
		return fmt.Errorf("%w: http:// URLs may only reach loopback addresses (https://, or PushOptions.AllowHTTP), not %s", errAddress, ip)
	case ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%w: %s is not a unicast address", errAddress, ip)
	case p.allowPrivate:
		return nil
	case ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return fmt.Errorf("%w: %s is in a private range (PushOptions.AllowPrivate)", errAddress, ip)
	}
	for _, r := range privateRanges {
		if r.Contains(ip) {
			return fmt.Errorf("%w: %s is in a private or reserved range %s (PushOptions.AllowPrivate)", errAddress, ip, r)
		}
	}
	return nil
}

// checkURL checks a webhook URL's form, and its host when it is an
// address (a name is resolved by resolveCheck): https, or http to a
// loopback host unless allowHTTP; no user info, no fragment.
func (p urlPolicy) checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("the url is required")
	}
	if len(raw) > maxPushURLBytes {
		return nil, fmt.Errorf("the url is %d bytes, limit %d", len(raw), maxPushURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("malformed url: %v", err)
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("url %q: the scheme must be https (or http to a loopback address)", raw)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("url %q has no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("url %q carries credentials: deliveries are signed instead", redact(u))
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, fmt.Errorf("url %q has a fragment", raw)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("url %q: bad port %q", raw, port)
		}
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.allowed(ip, p.loopbackOnly(u)); err != nil {
			return nil, fmt.Errorf("url %q: %v", raw, err)
		}
	} else if p.loopbackOnly(u) && !isLocalhost(host) {
		return nil, fmt.Errorf("url %q: http:// URLs may only reach loopback addresses (use https://, or PushOptions.AllowHTTP)", raw)
	}
	return u, nil
}

// redact is u without its user info.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// loopbackOnly reports whether u may only reach loopback addresses.
func (p urlPolicy) loopbackOnly(u *url.URL) bool { return u.Scheme == "http" && !p.allowHTTP }

func isLocalhost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// resolve returns host's addresses: host itself when it is one.
func (p urlPolicy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	if p.lookup != nil {
		return p.lookup(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// resolveCheck resolves u's host, as a registration does, and refuses it
// when no address it resolves to is allowed.
func (p urlPolicy) resolveCheck(ctx context.Context, u *url.URL) error {
	ctx, cancel := context.WithTimeout(ctx, defaultPushResolveTimeout)
	defer cancel()
	ips, err := p.resolve(ctx, u.Hostname())
	if err != nil {
		return fmt.Errorf("url %q: cannot resolve its host: %v", u.String(), err)
	}
	if len(ips) == 0 {
		return fmt.Errorf("url %q: its host has no address", u.String())
	}
	var refused error
	for _, ip := range ips {
		if refused = p.allowed(ip, p.loopbackOnly(u)); refused == nil {
			return nil
		}
	}
	return fmt.Errorf("url %q: %v", u.String(), refused)
}

// dialKey carries, in a delivery's context, whether its URL may only
// reach loopback addresses (http:// without AllowHTTP).
type dialKey struct{}

// client returns the HTTP client of deliveries: no proxy, no redirects,
// connections only to the addresses the policy allows, as resolved at
// dial time.
func (p urlPolicy) client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad port %q", port)
		}
		ips, err := p.resolve(ctx, host)
		if err != nil {
			return nil, err
		}
		loopbackOnly, _ := ctx.Value(dialKey{}).(bool)
		lastErr := fmt.Errorf("%w: %s has no address", errAddress, host)
		for _, ip := range ips {
			if err := p.allowed(ip, loopbackOnly); err != nil {
				lastErr = err
				continue
			}
			conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(n)).String())
			if err == nil {
				return conn, nil
			}
			lastErr = err
		}
		return nil, lastErr
	}
	tr := &http.Transport{
		Proxy:                 nil, // never a proxy from the environment: it would dial for us
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   16, // webhooks go to few hosts, several deliveries at once
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a 3xx is an answer, and not a 2xx
		},
	}
}
