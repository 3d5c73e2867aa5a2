// Command openapicheck checks the OpenAPI document (shared/httpapi/openapi.yaml, or the file
// named) against OpenAPI 3.1 and the route table, and exits 1 with its findings: `make lint`.
package main

import (
	"fmt"
	"os"

	"mediator/localdev/openapicheck"
	"mediator/shared/httpapi"
)

func main() {
	doc, name := httpapi.OpenAPI, "shared/httpapi/openapi.yaml"
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: openapicheck [openapi.yaml]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		var err error
		if doc, err = os.ReadFile(os.Args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		name = os.Args[1]
	}
	findings := openapicheck.Check(doc, httpapi.Routes)
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, f)
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
	fmt.Printf("%s: valid OpenAPI 3.1, every $ref resolves, %d routes as in the route table\n", name, len(httpapi.Routes))
}
