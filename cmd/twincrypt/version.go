package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what --version prints after "twincrypt ": the module
// version (a release tag, or the pseudo-version Go stamps on a build from
// a checkout), the VCS revision and time the binary was built from, and
// the Go toolchain. A binary built with -buildvcs=false, or outside a
// checkout, has no revision and says so.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return buildVersion() + " (no build information) " + runtime.Version()
	}
	return formatVersion(buildVersion(), bi.Settings, runtime.Version())
}

// formatVersion builds the line from the build settings.
func formatVersion(module string, settings []debug.BuildSetting, goVersion string) string {
	var rev, when string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if rev == "" {
		parts = append(parts, "revision unknown: built without VCS information")
	} else {
		parts = append(parts, "revision "+rev)
		if when != "" {
			parts = append(parts, when)
		}
		if modified {
			parts = append(parts, "with uncommitted changes")
		}
	}
	return fmt.Sprintf("%s (%s) %s", module, strings.Join(parts, ", "), goVersion)
}
