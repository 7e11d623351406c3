package main

import (
	"context"
	"errors"
)

// queueCmd is replaced by the queue emulator's command.
func queueCmd(ctx context.Context, args []string) error {
	return errors.New("queue: not built yet")
}
