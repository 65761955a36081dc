// Package endpoint parses and opens the endpoints of the driver protocol: a Unix socket (`unix:///path`) or
// loopback TCP (`http://127.0.0.1:PORT`, `tcp://127.0.0.1:PORT` or `127.0.0.1:PORT`).
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Endpoint is a parsed endpoint: Network is "unix" (Address a socket path) or "tcp" (Address host:port).
type Endpoint struct {
	Network string
	Address string
}

// Forms lists the accepted forms, for error messages.
const Forms = "unix:///path/to.sock, http://127.0.0.1:PORT, tcp://127.0.0.1:PORT or 127.0.0.1:PORT"

// Parse reads an endpoint. TCP endpoints must name a loopback address (127.0.0.0/8, ::1 or localhost): the
// protocol carries secrets in plain text and has no authentication, so it never leaves the machine.
func Parse(s string) (Endpoint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Endpoint{}, errors.New("empty endpoint (want " + Forms + ")")
	}
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		// unix:///abs/path (the usual form) or unix:path (gRPC's form for a relative path).
		path := rest
		if p, ok := strings.CutPrefix(rest, "//"); ok {
			if !strings.HasPrefix(p, "/") {
				return Endpoint{}, fmt.Errorf("endpoint %q: unix:// needs an absolute path, as in unix:///run/driver.sock", s)
			}
			path = p
		}
		if path == "" {
			return Endpoint{}, fmt.Errorf("endpoint %q: no socket path", s)
		}
		return Endpoint{Network: "unix", Address: path}, nil
	}
	hostPort := s
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		if scheme != "http" && scheme != "tcp" {
			return Endpoint{}, fmt.Errorf("endpoint %q: unsupported scheme %q (want %s)", s, scheme, Forms)
		}
		hostPort = strings.TrimSuffix(rest, "/")
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: %v (want %s)", s, err, Forms)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return Endpoint{}, fmt.Errorf("endpoint %q: bad port %q", s, port)
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return Endpoint{}, fmt.Errorf("endpoint %q: %q is not a loopback address (the protocol is unauthenticated and carries secrets; use 127.0.0.1, ::1 or a unix socket)", s, host)
		}
	}
	return Endpoint{Network: "tcp", Address: net.JoinHostPort(host, port)}, nil
}

// String is the endpoint in its canonical form (unix:///path or tcp://host:port).
func (e Endpoint) String() string {
	if e.Network == "unix" {
		if strings.HasPrefix(e.Address, "/") {
			return "unix://" + e.Address
		}
		return "unix:" + e.Address
	}
	return "tcp://" + e.Address
}

// Listen opens the endpoint for serving. A socket file left behind by a server that is gone is removed first;
// a socket a live server answers on, and a path that is not a socket, are errors.
func Listen(e Endpoint) (net.Listener, error) {
	if e.Network == "unix" {
		if fi, err := os.Lstat(e.Address); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%s exists and is not a socket; not removing it", e.Address)
			}
			if c, err := net.DialTimeout("unix", e.Address, time.Second); err == nil {
				_ = c.Close()
				return nil, fmt.Errorf("%s: another server is listening on this socket", e.Address)
			}
			if err := os.Remove(e.Address); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("removing stale socket: %w", err)
			}
		}
	}
	return net.Listen(e.Network, e.Address)
}

// Dial connects to the endpoint.
func (e Endpoint) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, e.Network, e.Address)
}
