package main

import (
	"strings"
	"testing"
)

// TestOpenDatabaseNeverEchoesThePassword: lib/pq's parse error quotes the
// URL it could not parse, password and all.
func TestOpenDatabaseNeverEchoesThePassword(t *testing.T) {
	_, err := openDatabase("postgres://owed:S3cr3t%zz@db/owed")
	if err == nil || !strings.Contains(err.Error(), "OWED_DATABASE_URL") || strings.Contains(err.Error(), "S3cr3t") {
		t.Errorf("openDatabase(a malformed URL) = %v, want an error naming OWED_DATABASE_URL without the password", err)
	}
}
