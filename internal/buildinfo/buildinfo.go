// Package buildinfo owns what a binary says about its own build: the
// release version, the source revision and the Go toolchain. The release
// build (deploy/Dockerfile, -buildvcs=false for reproducibility) sets
// Version and Revision with -ldflags -X; a plain `go build` in a checkout
// gets the revision from the VCS stamp Go embeds. It never reads the
// environment and never fails: what it cannot know it reports as "devel"
// or "unknown".
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the release build:
//
//	-ldflags "-X github.com/owedhq/owed/internal/buildinfo.version=v1.2.3 -X github.com/owedhq/owed/internal/buildinfo.revision=<commit>"
var (
	version  string
	revision string
)

// Info is one binary's build.
type Info struct {
	// Version is the release (the -X version), else the VCS revision
	// (with "-dirty" when the tree had changes), else "devel".
	Version string
	// Revision is the source commit, else "unknown".
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's build.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		info = resolve(version, revision, bi)
	})
	return info
}

// resolve picks each field from the linker flags first, then the VCS
// stamp in bi (which may be nil), then the fallback.
func resolve(ldVersion, ldRevision string, bi *debug.BuildInfo) Info {
	i := Info{Version: ldVersion, Revision: ldRevision, GoVersion: runtime.Version()}
	var vcsRev string
	var modified bool
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if i.Revision == "" {
		i.Revision = vcsRev
	}
	if i.Version == "" && vcsRev != "" {
		i.Version = short(vcsRev)
		if modified {
			i.Version += "-dirty"
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.Revision == "" {
		i.Revision = "unknown"
	}
	return i
}

// short is a commit's usual 12-character abbreviation.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// String is the line `<name> --version` prints after the name.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// Collector is the owed_build_info gauge: always 1, the build in its
// labels, so a dashboard can join any series on the version it came from.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "owed_build_info",
		Help:        "The running binary's build: always 1, with version, revision and goversion labels.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
