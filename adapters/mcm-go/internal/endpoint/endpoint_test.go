package endpoint

import "testing"

func TestParse(t *testing.T) {
	good := map[string]Endpoint{
		"unix:///run/d.sock":     {"unix", "/run/d.sock"},
		"unix:rel.sock":          {"unix", "rel.sock"},
		"http://127.0.0.1:8080":  {"tcp", "127.0.0.1:8080"},
		"http://127.0.0.1:8080/": {"tcp", "127.0.0.1:8080"},
		"tcp://127.0.0.1:1":      {"tcp", "127.0.0.1:1"},
		"127.0.0.1:50051":        {"tcp", "127.0.0.1:50051"},
		" 127.0.0.2:9 ":          {"tcp", "127.0.0.2:9"},
		"[::1]:9":                {"tcp", "[::1]:9"},
		"localhost:9":            {"tcp", "localhost:9"},
		"http://localhost:9":     {"tcp", "localhost:9"},
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "unix://", "unix://rel.sock", "unix:", "https://127.0.0.1:1", "grpc://127.0.0.1:1",
		"10.0.0.1:80", "0.0.0.0:80", ":80", "example.com:80", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, got)
		}
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{"unix:///a/b": "unix:///a/b", "127.0.0.1:5": "tcp://127.0.0.1:5", "unix:x": "unix:x"} {
		e, err := Parse(in)
		if err != nil || e.String() != want {
			t.Errorf("%q: %q, %v; want %q", in, e.String(), err, want)
		}
	}
}
