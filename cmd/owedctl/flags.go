package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// errHelp is returned when a command printed its help on request.
var errHelp = errors.New("help requested")

// newFlags returns a FlagSet whose --help output shows the synopsis and an
// example before the flags.
func newFlags(name, synopsis, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: owedctl %s\n\n", synopsis)
		if example != "" {
			fmt.Fprintf(os.Stderr, "example:\n  %s\n\n", example)
		}
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, turning -h into errHelp and other mistakes into a
// usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// The flag package has already printed the usage.
			return errHelp
		}
		return usageError{err.Error()}
	}
	return nil
}
