// Command nodes serves the node routes: PUT /v1/nodes/{node_id} (heartbeat) and DELETE.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("nodes")
	lambda.Start(httpapi.Nodes(d))
}
