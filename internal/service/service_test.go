package service

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
)

func TestBearer(t *testing.T) {
	b := NewBearer("s3cret")
	req := func(h string) *http.Request {
		r, _ := http.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		return r
	}
	for h, want := range map[string]bool{
		"Bearer s3cret": true, "bearer  s3cret ": true, "Bearer s3cre": false, "Bearer s3cret2": false,
		"Basic s3cret": false, "": false, "Bearer ": false, "s3cret": false,
	} {
		if got := b.Authorized(req(h)); got != want {
			t.Errorf("Authorized(%q) = %v, want %v", h, got, want)
		}
	}
	if (Bearer{}).Matches("") || NewBearer("").Authorized(req("Bearer ")) {
		t.Error("an empty secret must match nothing")
	}
}

func TestServerShutsDownAndRunsBeforeShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	released := make(chan struct{})
	done := make(chan error, 1)
	srv := Server{Handler: http.NotFoundHandler(), Log: zerolog.Nop(), BeforeShutdown: func() { close(released) }}
	go func() { done <- srv.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after a clean shutdown", err)
	}
	select {
	case <-released:
	default:
		t.Fatal("BeforeShutdown did not run")
	}
}
