// Validates custom resources against their CRDs' OpenAPI schemas, as compiled by the @kubernetes-models
// packages that scripts/setup_k8s_tools.sh installs. Usage: node validate_crds.mjs NODE_MODULES_DIR < docs.json
// (a JSON array of manifests); prints a JSON array of {kind, name, error} (error null when valid).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const MODELS = {
  "gateway.networking.k8s.io/v1": "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1",
  "monitoring.coreos.com/v1": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
};

const nodeModules = process.argv[2];
const docs = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const doc of docs) {
  const dir = MODELS[doc.apiVersion];
  const result = { kind: doc.kind, name: doc.metadata?.name, error: null };
  if (!dir) {
    result.error = `no schema for ${doc.apiVersion}`;
  } else {
    const module = await import(pathToFileURL(join(nodeModules, dir, `${doc.kind}.js`)).href);
    try {
      new module[doc.kind](doc).validate();
    } catch (e) {
      result.error = e.message;
    }
  }
  results.push(result);
}
process.stdout.write(JSON.stringify(results));
