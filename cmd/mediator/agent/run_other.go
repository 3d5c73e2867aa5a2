//go:build !linux

package agent

// Run refuses: the agent relies on Linux (process groups read from /proc, a child subreaper).
func Run(cfg Config) int {
	cfg.Log.Error("mediator agent runs on Linux only")
	return ExitSetup
}
