package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// markerFile says a folder is owedctl dev's own, so --fresh may delete it.
const markerFile = "OWED-DEV-FOLDER"

func (s *Stack) logDir() string { return filepath.Join(s.cfg.Dir, "logs") }

// prepareDir wipes the folder for --fresh (only if it is ours) and creates
// the folders of this run.
func (s *Stack) prepareDir(ctx context.Context) error {
	dir := s.cfg.Dir
	_, statErr := os.Stat(filepath.Join(dir, "pg", "data", "PG_VERSION"))
	s.resumed = statErr == nil && s.cfg.DatabaseURL == "" && !s.cfg.Fresh
	if s.cfg.Fresh {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
				return fmt.Errorf("--fresh: refusing to wipe %s: it was not created by owedctl dev (no %s file); choose another --dir", dir, markerFile)
			}
			// A cluster an earlier run left running (a drill's standby
			// too) must stop before its folder goes.
			if c, err := newCluster(dir, s.logDir()); err == nil {
				c.stopLeftover(ctx, c.primary)
				c.stopLeftover(ctx, c.standbyNode())
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("--fresh: wipe %s: %w", dir, err)
			}
		}
	}
	if err := os.MkdirAll(s.logDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", s.logDir(), err)
	}
	return os.WriteFile(filepath.Join(dir, markerFile),
		[]byte("This folder belongs to owedctl dev (make run); `owedctl dev --fresh` deletes it.\n"), 0o644)
}
