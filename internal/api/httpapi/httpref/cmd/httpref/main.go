// Command httpref writes the HTTP reference page from the OpenAPI
// document: httpref -o docs/http-reference.md internal/api/httpapi/openapi.json
// (run by go generate ./internal/api/httpapi).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/counterd/counterd/internal/api/httpapi/httpref"
)

func main() {
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: httpref [-o FILE] openapi.json")
		os.Exit(2)
	}
	spec, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpref:", err)
		os.Exit(1)
	}
	md, err := httpref.Markdown(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpref:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(md)
	} else {
		err = os.WriteFile(*out, md, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpref:", err)
		os.Exit(1)
	}
}
