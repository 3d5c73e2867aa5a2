// Command prerequisites prints what make dev, make test and make lint need besides Go, from
// localdev/prerequisites/list.txt:
//
//	prerequisites           make prerequisites: the install lines for Debian/Ubuntu and macOS,
//	                        and what this machine lacks
//	prerequisites -missing  what .ci/run installs: one line per package this machine lacks,
//	                        "<kind> <package>" with kind apt or pip (brew, cask, pip or none on macOS)
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"mediator/localdev/prerequisites"
)

func main() {
	missing := flag.Bool("missing", false, "print only what this machine lacks, one \"<kind> <package>\" a line")
	flag.Parse()
	lacking := prerequisites.Missing()
	if *missing {
		for _, item := range prerequisites.InstallItems(lacking, runtime.GOOS) {
			fmt.Println(item)
		}
		return
	}
	fmt.Println("Debian/Ubuntu:")
	for _, l := range prerequisites.DebianLines() {
		fmt.Println("  " + l)
	}
	fmt.Println("macOS:")
	for _, l := range prerequisites.MacOSLines() {
		fmt.Println("  " + l)
	}
	var lacks []string
	for _, p := range prerequisites.MacOSLacks() {
		lacks = append(lacks, p.Name)
	}
	fmt.Printf("  (macOS has no %s: the tests that need them fail there)\n", strings.Join(lacks, " or "))
	if len(lacking) == 0 {
		fmt.Println("This machine has every one.")
		return
	}
	fmt.Println("This machine lacks:")
	for _, p := range lacking {
		fmt.Printf("  %-18s %s\n", p.Name, p.Why)
	}
	os.Exit(1)
}
