package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/testdb"
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

func TestStartOpensEverythingOrNothing(t *testing.T) {
	db := testdb.New(t)
	b := Basics{LogLevel: "info", DatabaseURL: db.AppURL, DBMaxConns: 2, ListenAddr: "127.0.0.1:0"}
	for _, c := range []struct {
		change func(*Basics)
		want   string
	}{
		{func(b *Basics) { b.LogLevel = "loud" }, "OWED_LOG_LEVEL"},
		{func(b *Basics) { b.DatabaseURL = "" }, "OWED_DATABASE_URL"},
		{func(b *Basics) { b.ListenAddr = "127.0.0.1:-1" }, "OWED_LISTEN_ADDR"},
		{func(b *Basics) { b.MetricsAddr = "127.0.0.1:-1" }, "OWED_METRICS_ADDR"},
		{func(b *Basics) { b.ListenAddr, b.MetricsAddr = "127.0.0.1:18080", "127.0.0.1:18080" }, "OWED_METRICS_ADDR"},
	} {
		bad := b
		c.change(&bad)
		if p, err := Start("test", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			if p != nil {
				p.Close()
			}
			t.Errorf("Start(%+v) = %v, want an error naming %s", bad, err, c.want)
		}
	}

	p, err := Start("test", b)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.DB.PingContext(p.Ctx); err != nil {
		t.Fatalf("the pool is not open: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(p.Ctx, p.Listener, http.NotFoundHandler(), p.Log) }()
	p.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if p.Ctx.Err() == nil {
		t.Error("Shutdown did not end Ctx")
	}
}

// TestCacheFetchesOncePerTTL: however many callers come at once, one fetch
// answers them all, its error included, until the TTL has passed.
func TestCacheFetchesOncePerTTL(t *testing.T) {
	clk := clock.NewStub(time.Now())
	var fetches atomic.Int32
	release := make(chan struct{})
	c := &Cache[int]{Clock: clk, Fetch: func(context.Context) (int, error) {
		<-release
		return int(fetches.Add(1)), errors.New("down")
	}}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(context.Background()); v != 1 || err == nil {
				t.Errorf("Get = %d, %v; want the one fetch's 1 and its error", v, err)
			}
		}()
	}
	close(release)
	wg.Wait()
	clk.Advance(CacheTTLDefault - time.Microsecond)
	if v, _ := c.Get(context.Background()); v != 1 || fetches.Load() != 1 {
		t.Errorf("within the TTL: %d after %d fetches, want the cached 1", v, fetches.Load())
	}
	clk.Advance(time.Microsecond)
	if v, _ := c.Get(context.Background()); v != 2 {
		t.Errorf("after the TTL: %d, want a second fetch", v)
	}
	// A caller that gives up while another fetch holds the turn returns.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.turn <- struct{}{}
	if _, err := c.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context while another fetch runs: %v", err)
	}
	<-c.turn
}
