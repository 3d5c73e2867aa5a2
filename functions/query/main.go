// Command query serves the read routes: runs, the queue, nodes, leases and /healthz.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("query")
	lambda.Start(httpapi.Query(d))
}
