// Command result serves POST /v1/runs/{run_id}/steps/{step_id}/result: a node's step report.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("result")
	lambda.Start(httpapi.Result(d))
}
