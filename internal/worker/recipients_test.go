package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/telegram"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

const botToken = "123456:ABC-recipients-test"

// fakeBot is a Bot API sendMessage that answers the chats in limited with
// Telegram's 429 (retry after an hour) and accepts every other chat's
// message, counting the requests each chat got.
type fakeBot struct {
	mu      sync.Mutex
	limited map[string]bool
	sent    map[string]int
}

func newFakeBot(t *testing.T, limited ...string) (*fakeBot, *telegram.Client) {
	t.Helper()
	f := &fakeBot{limited: map[string]bool{}, sent: map[string]int{}}
	for _, c := range limited {
		f.limited[c] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bot"+botToken+"/sendMessage" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			ChatID string `json:"chat_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.sent[req.ChatID]++
		n, limited := f.sent[req.ChatID], f.limited[req.ChatID]
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if limited {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3600","parameters":{"retry_after":3600}}`)
			return
		}
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d}}`, n)
	}))
	t.Cleanup(srv.Close)
	c, err := telegram.New(telegram.Config{Token: botToken, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func (f *fakeBot) requests(chat string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[chat]
}

// scheduleChats schedules one Telegram row due now to each chat.
func scheduleChats(t *testing.T, b *bundle, tenant string, chats ...string) []ledger.Scheduled {
	t.Helper()
	return b.Schedule(t, tenant, len(chats), time.Now().Add(-time.Second), func(i int, r *ledger.NewNotification) {
		r.Channel, r.Recipient = payload.ChannelTelegram, chats[i]
		r.RefID = fmt.Sprintf("%s-%d", chats[i], time.Now().UnixNano())
	})
}

// startBot starts a worker sending every row through bot, on the bot's
// shared pace in Postgres (Telegram's default 30/s).
func startBot(t *testing.T, b *bundle, bot *telegram.Client) {
	t.Helper()
	l, paces := b.process(t, "30/s")
	b.start(t, func(o *worker.Options) {
		o.Ledger, o.Pace = l, paces
		o.Route = func(string) (provider.Sender, error) { return bot, nil }
	})
}

// A Telegram 429 for one chat (its limit is about one message a second)
// delays that chat's rows only (issue 25): the bot's shared pace is not
// paused, its other chats are sent to at once, and a later row to the
// limited chat waits for the chat's limit without a request. Before, any
// 429 paused the bot's account, for Retry-After (capped at 15 minutes), for
// every chat.
func TestAChatsRateLimitDelaysThatChatOnly(t *testing.T) {
	b := setup(t, stacktest.Options{})
	fake, bot := newFakeBot(t, "-100limited")
	first := scheduleChats(t, b, "acme", "-100limited")
	b.sweepAll(t)
	startBot(t, b, bot)
	waitFor(t, "the limited chat's row was answered 429", func() bool {
		d, err := b.Ledger.Get(bg, "acme", first[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		return fake.requests("-100limited") == 1 && d.State == ledger.StateQueued && d.LastError != ""
	})
	st, err := pace.NewAccounts(b.DB.App, nil).State(bg, telegram.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Wait > 0 {
		t.Errorf("the bot's account is paused for %s after one chat's 429; want only the chat to wait", st.Wait)
	}

	later := scheduleChats(t, b, "acme", "-100other", "42", "-100limited")
	b.sweepAll(t)
	waitFor(t, "the other chats' rows are delivered", func() bool {
		for _, r := range later[:2] {
			if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateDelivered {
				return false
			}
		}
		return true
	})
	waitFor(t, "the limited chat's later row waits for the chat's limit", func() bool {
		d, _ := b.Ledger.Get(bg, "acme", later[2].ID)
		return d.State == ledger.StateQueued && d.LastError != ""
	})
	if n := fake.requests("-100limited"); n != 1 {
		t.Errorf("the limited chat got %d requests, want 1: a later row to it waits without one", n)
	}
	for _, r := range []ledger.Scheduled{first[0], later[2]} {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.Attempts != 0 || d.LeaseUntil == nil || time.Until(*d.LeaseUntil) < 10*time.Minute {
			t.Errorf("limited chat's row %d: %d attempts, lease until %v; want no attempt, waiting in the ledger for the chat's limit",
				r.ID, d.Attempts, d.LeaseUntil)
		}
	}
}

// A limit that several chats hit at once is the bot's, whatever the answer
// says: the account's shared pace is paused as for any 429.
func TestManyChatsLimitedAtOncePauseTheBot(t *testing.T) {
	b := setup(t, stacktest.Options{})
	chats := []string{"-1001", "-1002", "-1003", "-1004", "-1005", "-1006"}
	_, bot := newFakeBot(t, chats...)
	scheduleChats(t, b, "acme", chats...)
	b.sweepAll(t)
	startBot(t, b, bot)
	accounts := pace.NewAccounts(b.DB.App, nil)
	waitFor(t, "the bot's account is paused", func() bool {
		st, err := accounts.State(bg, telegram.Name)
		if err != nil {
			t.Fatal(err)
		}
		return st.Wait > 10*time.Minute
	})
}
