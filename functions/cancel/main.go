// Command cancel serves POST /v1/runs/{run_id}/cancel: cancel a run.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("cancel")
	lambda.Start(httpapi.Cancel(d))
}
