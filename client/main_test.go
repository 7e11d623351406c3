package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/api/openapitest"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// The real API over a fresh test database, shared by the tests and the
// examples: serverURL, a tenant token of "acme" and the service token.
var (
	serverURL   string
	tenantToken string
	apiHandler  http.Handler
	// apiDB and checked let a test serve the API with its own options,
	// its exchanges checked against the contract like apiHandler's.
	apiDB   *testdb.DB
	checked func(http.Handler) http.Handler
)

const serviceToken = "client-tests-service-token-0123456789"

// contractErrors collects every exchange the contract refused.
var contractErrors struct {
	sync.Mutex
	list []error
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	admin := os.Getenv("OWED_TEST_DATABASE_URL")
	if admin == "" {
		fmt.Fprintln(os.Stderr, "OWED_TEST_DATABASE_URL is not set: run the tests with `make test`")
		return 1
	}
	db, drop, err := testdb.Create(ctx, admin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer drop()
	if tenantToken, _, err = api.NewTokens(db.Admin, nil).Create(ctx, "acme", "client tests"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	spec, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	apiDB = db
	checked = func(h http.Handler) http.Handler {
		return spec.Wrap(h, func(err error) {
			contractErrors.Lock()
			contractErrors.list = append(contractErrors.list, err)
			contractErrors.Unlock()
		})
	}
	apiHandler = checked(api.New(api.Options{Ledger: ledger.New(db.App, nil), Tokens: api.NewTokens(db.App, nil),
		ServiceToken: serviceToken, Log: zerolog.Nop()}))
	srv := httptest.NewServer(apiHandler)
	defer srv.Close()
	serverURL = srv.URL
	code := m.Run()
	for _, err := range contractErrors.list {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		code = 1
	}
	return code
}
