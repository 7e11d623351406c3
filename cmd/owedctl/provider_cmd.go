package main

import (
	"context"
	"errors"
)

// providerCmd is replaced by the sandbox provider's command.
func providerCmd(ctx context.Context, args []string) error {
	return errors.New("provider: not built yet")
}
