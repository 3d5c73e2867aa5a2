// Command submit serves POST /v1/runs: place a run now, queue it, or fail it at once.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("submit")
	lambda.Start(httpapi.Submit(d))
}
