package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func versionCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this build's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			goVersion := ""
			if info != nil {
				goVersion = info.GoVersion
			}
			fmt.Fprintf(a.stdout, "mediator %s (%s)\n", version(), goVersion)
			return nil
		},
	}
}

// version is the module's version when installed at one (go install mediator/cmd/mediator@v1.2.3),
// else the commit it was built from, marked when the tree had changes.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}

// noArgs, oneArg and twoArgs check a command's arguments, as usage errors.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments (got %q)", cmd.CommandPath(), args)
	}
	return nil
}

func oneArg(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef("%s takes one argument, the %s", cmd.CommandPath(), name)
		}
		return nil
	}
}

func twoArgs(names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 2 {
			return usagef("%s takes two arguments, the %s", cmd.CommandPath(), names)
		}
		return nil
	}
}
