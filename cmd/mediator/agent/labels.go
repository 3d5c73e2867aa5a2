package agent

import (
	"fmt"
	"mediator/shared/wire"
	"os"
	"slices"
	"strings"
)

// ReadLabelsFile reads one label per line; blank lines and everything from a # are ignored.
func ReadLabelsFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var labels []string
	for i, line := range strings.Split(string(data), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !wire.LabelPattern.MatchString(line) {
			return nil, fmt.Errorf("%s:%d: %q is not a label (key=value or key: %s)", path, i+1, clip(line, 80), wire.LabelPattern)
		}
		labels = append(labels, line)
	}
	return labels, nil
}

// MergeLabels is the labels the node advertises: both lists, checked, sorted, each once.
func MergeLabels(lists ...[]string) ([]string, error) {
	out := []string{}
	for _, list := range lists {
		for _, l := range list {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if !wire.LabelPattern.MatchString(l) {
				return nil, fmt.Errorf("%q is not a label (key=value or key: %s)", clip(l, 80), wire.LabelPattern)
			}
			out = append(out, l)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > wire.MaxLabels {
		return nil, fmt.Errorf("%d labels; a node advertises at most %d", len(out), wire.MaxLabels)
	}
	return out, nil
}
