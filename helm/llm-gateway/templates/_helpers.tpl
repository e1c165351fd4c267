{{/* Names, labels and the pieces several templates share. */}}


{{- define "llm-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name: at most 40 characters, so that "-" + a suffix of up to 22 still fits 63. */}}
{{- define "llm-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "llm-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; call with (dict "ctx" $ "component" "gateway"). */}}
{{- define "llm-gateway.labels" -}}
helm.sh/chart: {{ include "llm-gateway.chart" .ctx }}
{{ include "llm-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: {{ include "llm-gateway.name" .ctx }}
{{- end }}

{{/* Selector labels; (dict "ctx" $ "component" "worker" "model" "name") adds the worker's model. */}}
{{- define "llm-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-gateway.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .model }}
llm-gateway/worker: {{ . }}
{{- end }}
{{- end }}

{{- define "llm-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "llm-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag or repository@digest; call with (dict "image" .Values.image "ctx" $). */}}
{{- define "llm-gateway.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* A model id as a DNS label piece: lower case, [a-z0-9-], at most 22 characters. */}}
{{- define "llm-gateway.modelSlug" -}}
{{- regexReplaceAll "[^a-z0-9]+" (lower .) "-" | trunc 22 | trimAll "-" }}
{{- end }}

{{/* What tells a model's bundled worker apart: worker.nameSuffix, else the model id's slug. Its Deployment and
Service names end with it (rendering refuses two alike), and its pods carry it as their llm-gateway/worker label: two
ids with one slug (a-b, A_B; or alike in their first 22 characters) told apart by nameSuffix must not share pods. */}}
{{- define "llm-gateway.workerKey" -}}
{{- $worker := .model.worker | default dict }}
{{- default (include "llm-gateway.modelSlug" .model.id) $worker.nameSuffix }}
{{- end }}

{{/* Name of a model's bundled worker Deployment and headless Service; call with (dict "ctx" $ "model" $model). */}}
{{- define "llm-gateway.workerName" -}}
{{- printf "%s-%s" (include "llm-gateway.fullname" .ctx) (include "llm-gateway.workerKey" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The settings of a model's worker: the `worker` defaults overridden by the model's own mapping. */}}
{{- define "llm-gateway.workerSettings" -}}
{{- toYaml (mergeOverwrite (deepCopy .ctx.Values.worker) (deepCopy (.model.worker | default dict))) }}
{{- end }}

{{/* A quantity given in values as it is, a whole number as digits (YAML reads 3000000000 as a float, which would
render as 3e+09). */}}
{{- define "llm-gateway.quantity" -}}
{{- ternary (int64 .) . (kindIs "float64" .) }}
{{- end }}

{{/* The sizeLimit of a worker's /tmp (worker.tmp): its own, else 4 bytes per parameter (the float32 copy of a GGUF
checkpoint the conversion cache writes there) plus 2Gi, else the pod's memory limit plus 2Gi (the worker holds that
copy in memory while it writes it). Call with (dict "model" $model "worker" $w). */}}
{{- define "llm-gateway.workerTmpSize" -}}
{{- $tmp := .worker.tmp | default dict }}
{{- $headroom := 2147483648.0 }}
{{- if not (kindIs "invalid" $tmp.sizeLimit) }}
{{- include "llm-gateway.quantity" $tmp.sizeLimit }}
{{- else }}
{{- $bytes := 0.0 }}
{{- if not (kindIs "invalid" $tmp.parameters) }}
{{- $count := toString $tmp.parameters }}
{{- $digits := regexFind "^[0-9.eE+]+" $count }}
{{- $unit := trimPrefix $digits $count }}
{{- $scale := dict "" 1 "K" 1e3 "M" 1e6 "B" 1e9 "T" 1e12 }}
{{- if or (not $digits) (not (hasKey $scale $unit)) }}{{ fail (printf "models: %s: worker.tmp.parameters %v: a count such as 8B, 135M or 7.2e9" .model.id $tmp.parameters) }}{{ end }}
{{- $bytes = addf (mulf 4 (float64 $digits) (get $scale $unit)) $headroom }}
{{- else if include "llm-gateway.quantityBytes" (((.worker.resources | default dict).limits | default dict).memory | default "") }}
{{- $bytes = addf (include "llm-gateway.quantityBytes" .worker.resources.limits.memory) $headroom }}
{{- else }}
{{- fail (printf "models: %s: worker.tmp: set sizeLimit, or parameters (the model's parameter count: its float32 copy takes 4 bytes each on the node's disk), or a memory limit to derive the /tmp size from" .model.id) }}
{{- end }}
{{- printf "%dMi" (divf $bytes 1048576 | ceil | int64) }}
{{- end }}
{{- end }}

{{/* The xgrammar the worker image has (pyproject.toml pins it; a test keeps the two equal). */}}
{{- define "llm-gateway.workerXgrammar" -}}0.2.9{{- end }}

{{/* The gateway configuration file (gateway/process/config.py), from .Values.models. */}}
{{- define "llm-gateway.config" -}}
{{- $models := list }}
{{- $ids := dict }}
{{- range $model := .Values.models }}
{{- $backend := $model.backend }}
{{- if hasKey $ids $model.id }}
{{- fail (printf "models: two models have the id %s; the gateway refuses to start with duplicate ids" $model.id) }}
{{- end }}
{{- $_ := set $ids $model.id true }}
{{- $addresses := 0 }}
{{- range list $backend.url $backend.urls $backend.service }}{{ if . }}{{ $addresses = add1 $addresses }}{{ end }}{{ end }}
{{- if gt $addresses 1 }}
{{- fail (printf "models: %s: set one of backend.url, backend.urls and backend.service (the others would be ignored)" $model.id) }}
{{- end }}
{{- $out := dict "id" $model.id }}
{{- with $model.family }}{{ $_ := set $out "family" . }}{{ end }}
{{- with $model.checkpoint }}{{ $_ := set $out "checkpoint" . }}{{ end }}
{{- with $model.options }}{{ $_ := set $out "options" . }}{{ end }}
{{- with $model.defaultMaxTokens }}{{ $_ := set $out "default_max_tokens" . }}{{ end }}
{{- with $model.maxRunning }}{{ $_ := set $out "max_running" . }}{{ end }}
{{- $processes := int (default 1 $.Values.gateway.workers) }}
{{- if and $.Values.policies.enabled $model.maxRunning (gt $processes (int $model.maxRunning)) }}
{{- fail (printf "models: %s: maxRunning %d cannot be divided among gateway.workers %d processes (each needs one slot at least); the gateway refuses to start" $model.id (int $model.maxRunning) $processes) }}
{{- end }}
{{- $cfg := dict "request_timeout_s" $.Values.gateway.requestTimeoutSeconds }}
{{- if eq $backend.type "worker" }}
{{- $w := include "llm-gateway.workerSettings" (dict "ctx" $ "model" $model) | fromYaml }}
{{- $host := printf "%s.%s.svc.%s" (include "llm-gateway.workerName" (dict "ctx" $ "model" $model)) $.Release.Namespace $.Values.clusterDomain }}
{{- $_ := merge $cfg (dict "type" "sglang" "incremental" true "xgrammar" (include "llm-gateway.workerXgrammar" $) "dns" (dict "host" $host "port" $w.port "scheme" "http")) }}
{{- else if eq $backend.type "embedded" }}
{{- $_ := set $cfg "type" "worker" }}
{{- else if has $backend.type (list "sglang" "vllm") }}
{{- $_ := set $cfg "type" $backend.type }}
{{- range concat (list) ($backend.urls | default list) (ternary (list $backend.url) (list) (not (empty $backend.url))) }}
{{- if and (include "llm-gateway.urlHasCredentials" .) (not $.Values.gateway.configAsSecret) }}
{{- fail (printf "models: %s: a backend URL carries credentials (user:password@); set gateway.configAsSecret=true, or the ConfigMap shows them to whoever may read ConfigMaps" $model.id) }}
{{- end }}
{{- end }}
{{- if $backend.url }}
{{- $_ := set $cfg "url" $backend.url }}
{{- else if $backend.urls }}
{{- $_ := set $cfg "urls" $backend.urls }}
{{- else if $backend.service }}
{{- $svc := $backend.service }}
{{- $host := printf "%s.%s.svc.%s" $svc.name (default $.Release.Namespace $svc.namespace) $.Values.clusterDomain }}
{{- /* A headless Service resolves to pod addresses and maps no port: the gateway dials the pods' own (targetPort). */}}
{{- $_ := set $cfg "dns" (dict "host" $host "port" (int ($svc.targetPort | default $svc.port)) "scheme" (default "http" $svc.scheme) "refresh_s" (default 10 $svc.refreshSeconds)) }}
{{- else }}
{{- fail (printf "models: %s: backend type %s needs url, urls or service" $model.id $backend.type) }}
{{- end }}
{{- else }}
{{- $cfg = dict "type" "none" }}
{{- end }}
{{- $_ := set $out "backend" (mergeOverwrite $cfg (deepCopy ($backend.settings | default dict))) }}
{{- $models = append $models $out }}
{{- end }}
{{- toYaml (dict "models" $models) }}
{{- end }}

{{/* The external backends, for the NetworkPolicy: {port, selector} per url, urls entry or service (selector: the
pods of a backend.service with a selector, in the release namespace). */}}
{{- define "llm-gateway.externalBackends" -}}
{{- $out := list }}
{{- range $model := .Values.models }}
{{- $b := $model.backend }}
{{- if has $b.type (list "sglang" "vllm") }}
{{- if $b.service }}
{{- $out = append $out (dict "port" (int ($b.service.targetPort | default $b.service.port)) "selector" ($b.service.selector | default dict)) }}
{{- end }}
{{- range $url := concat (list) ($b.urls | default list) (ternary (list $b.url) (list) (not (empty $b.url))) }}
{{- $out = append $out (dict "port" (int (include "llm-gateway.urlPort" $url)) "selector" dict) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml (dict "backends" ($out | uniq)) }}
{{- end }}

{{/* "true" when a URL carries a user or password (scheme://user:password@host). */}}
{{- define "llm-gateway.urlHasCredentials" -}}
{{- if regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@" . }}true{{ end }}
{{- end }}

{{/* The TCP port a URL connects to: its own, else its scheme's (443 for https, 80 for http, 6379 for redis and
rediss). */}}
{{- define "llm-gateway.urlPort" -}}
{{- $u := urlParse . }}
{{- regexFind ":[0-9]+$" $u.host | trimPrefix ":" | default (get (dict "https" "443" "redis" "6379" "rediss" "6379") $u.scheme) | default "80" }}
{{- end }}

{{/* Whether a Redis URL reaches the gateway (external URL, existing Secret or the in-chart Redis). */}}
{{- define "llm-gateway.redisEnabled" -}}
{{- if or .Values.redis.enabled .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{- define "llm-gateway.redisSecretName" -}}
{{- default (printf "%s-redis-url" (include "llm-gateway.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{/* The Secret holding the Redis password: redis.auth.existingSecret, else the generated one of the in-chart Redis;
empty for an external Redis without one (its URL may carry the password). */}}
{{- define "llm-gateway.redisAuthSecretName" -}}
{{- if .Values.redis.auth.existingSecret }}
{{- .Values.redis.auth.existingSecret }}
{{- else if .Values.redis.enabled }}
{{- printf "%s-redis-auth" (include "llm-gateway.fullname" .) }}
{{- end }}
{{- end }}

{{- define "llm-gateway.redisAuthSecretKey" -}}
{{- ternary .Values.redis.auth.existingSecretKey "password" (not (empty .Values.redis.auth.existingSecret)) }}
{{- end }}

{{/* The generated password of the in-chart Redis: the one its Secret already holds (an upgrade keeps it), else a new
one; drawn once per render (every template that includes it gets the same). */}}
{{- define "llm-gateway.redisGeneratedPassword" -}}
{{- if not (hasKey .Values "_redisPassword") }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "llm-gateway.redisAuthSecretName" .) }}
{{- $kept := (($old | default dict).data | default dict).password }}
{{- $_ := set .Values "_redisPassword" (ternary (b64dec (toString $kept)) (randAlphaNum 32) (not (empty $kept))) }}
{{- end }}
{{- .Values._redisPassword }}
{{- end }}

{{/* Pod annotations that roll pods using the Redis password when the chart generates it (a deleted Secret is
generated anew on the next upgrade: Redis and the gateway take the new one together). */}}
{{- define "llm-gateway.redisAuthChecksum" -}}
{{- if and .Values.redis.enabled (not .Values.redis.auth.existingSecret) }}
checksum/redis-auth: {{ include "llm-gateway.secretChecksum" (dict "ctx" . "content" (include "llm-gateway.redisGeneratedPassword" .)) }}
{{- end }}
{{- end }}

{{/* "true" when a pod annotation hashes what a Secret of the chart holds: the Redis URL, the generated Redis
password, the configuration with gateway.configAsSecret. */}}
{{- define "llm-gateway.hasSecretChecksums" -}}
{{- $url := and (include "llm-gateway.redisEnabled" .) (not .Values.redis.existingSecret) }}
{{- $auth := and .Values.redis.enabled (not .Values.redis.auth.existingSecret) }}
{{- if or $url $auth .Values.gateway.configAsSecret }}true{{ end }}
{{- end }}

{{/* The Secret holding the key of the secret-derived checksums (when secretChecksumKey does not give it). */}}
{{- define "llm-gateway.checksumKeySecretName" -}}
{{- printf "%s-checksum-key" (include "llm-gateway.fullname" .) }}
{{- end }}

{{/* The key of the secret-derived checksums: secretChecksumKey, else the one the chart's Secret already holds (an
upgrade keeps it, so unchanged Secrets roll no pod), else a new one; drawn once per render. */}}
{{- define "llm-gateway.checksumKey" -}}
{{- if not (hasKey .Values "_checksumKey") }}
{{- $key := .Values.secretChecksumKey | default "" | toString }}
{{- if not $key }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "llm-gateway.checksumKeySecretName" .) }}
{{- $kept := (($old | default dict).data | default dict).key }}
{{- $key = ternary (b64dec (toString $kept)) (randAlphaNum 43) (not (empty $kept)) }}
{{- end }}
{{- $_ := set .Values "_checksumKey" $key }}
{{- end }}
{{- .Values._checksumKey }}
{{- end }}

{{/* A pod annotation's checksum of what a Secret holds, keyed (sha256(key + sha256(key + content))) with a key only
Secrets hold: a plain sha256 would let whoever reads pod specs test guesses of a weak password offline. Call with
(dict "ctx" $ "content" text). */}}
{{- define "llm-gateway.secretChecksum" -}}
{{- $key := include "llm-gateway.checksumKey" .ctx }}
{{- print $key (print $key .content | sha256sum) | sha256sum }}
{{- end }}

{{/* "true" when the default NetworkPolicies leave the bundled workers open: a ServiceMonitor scrapes them and
networkPolicy.prometheus does not say from where (with networkPolicy.enabled, rendering refuses that instead). */}}
{{- define "llm-gateway.workerScrapesUnplaced" -}}
{{- $np := .Values.networkPolicy }}
{{- $workers := false }}
{{- range .Values.models }}{{ if eq .backend.type "worker" }}{{ $workers = true }}{{ end }}{{ end }}
{{- if and $workers $np.isolateWorkersAndRedis (not $np.enabled) .Values.serviceMonitor.enabled (not $np.prometheus) }}true{{ end }}
{{- end }}

{{/* A Gateway API Duration (GEP-2257: at most 4 parts of at most 5 digits) in milliseconds. */}}
{{- define "llm-gateway.durationMs" -}}
{{- $ms := 0 }}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- $ms = add $ms (mul (regexFind "^[0-9]+" . | int64) (get (dict "h" 3600000 "m" 60000 "s" 1000 "ms" 1) $unit)) }}
{{- end }}
{{- $ms }}
{{- end }}

{{/* The longest a request may take in the gateway, in whole seconds: the longest model deadline, the longest wait
in a fair queue (with policies.enabled: 30 s, the gateway's default, or with "policyQueues" the longest queue_timeout_s
of the rendered policies), and 30 s to plan. Call with (dict "ctx" $ "policyQueues" true|false). The HTTPRoute's
timeout (policyQueues) and the gateway's drain (not: a policy edit must not roll the pods) default to it. */}}
{{- define "llm-gateway.longestRequestSeconds" -}}
{{- $v := .ctx.Values }}
{{- $longest := 0.0 }}
{{- range $v.models }}
{{- if ne .backend.type "none" }}
{{- $longest = maxf $longest (include "llm-gateway.modelDeadline" (dict "ctx" $.ctx "model" .)) }}
{{- end }}
{{- end }}
{{- $queue := 0.0 }}
{{- if $v.policies.enabled }}
{{- $queue = 30.0 }}
{{- if .policyQueues }}
{{- range $policy := prepend (values ($v.policies.tenants | default dict)) ($v.policies.defaults | default dict) }}
{{- with ($policy.limits | default dict).queue_timeout_s }}{{ $queue = maxf $queue . }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- addf $longest $queue 30 | ceil | int64 }}
{{- end }}

{{/* A model's deadline in seconds (its backend.settings.request_timeout_s, else gateway.requestTimeoutSeconds);
call with (dict "ctx" $ "model" $model). */}}
{{- define "llm-gateway.modelDeadline" -}}
{{- ((.model.backend.settings | default dict).request_timeout_s | default .ctx.Values.gateway.requestTimeoutSeconds) | float64 }}
{{- end }}

{{/* --drain-timeout: gateway.drain.timeoutSeconds, else the longest a request may take (requests in flight when a
pod is replaced run to their end), with the gateway's default fair-queue wait: a tenant's own queue_timeout_s is
left out, since the pod template would change with it and a policy edit would roll the pods. */}}
{{- define "llm-gateway.drainTimeoutSeconds" -}}
{{- $set := .Values.gateway.drain.timeoutSeconds }}
{{- ternary (include "llm-gateway.longestRequestSeconds" (dict "ctx" . "policyQueues" false)) (toString $set) (kindIs "invalid" $set) }}
{{- end }}

{{/* The gateway pod's terminationGracePeriodSeconds: its drain (--drain-delay, then --drain-timeout), then its exit,
then gateway.terminationGraceMarginSeconds, so the kubelet's SIGKILL never cuts a drain or an exit the gateway still
runs. The exit: 10 s to stop each embedded worker in turn (gateway/process/supervisor.py: WORKER_STOP_GRACE_S), and
the gateway's own bound on what follows its drain (gateway/process/group.py: exit_after_drain_s): the settlements its
limits store missed, tried again (policies/limits/settle_backlog.py: first_tries_s, 3.5 s of pauses and 4 tries of a
turn and a call, --redis-timeout or 0.5 s each), 3 s to flush the spans and 1 s to exit. No preStop hook:
--drain-delay is that wait, inside the gateway. */}}
{{- define "llm-gateway.terminationGraceSeconds" -}}
{{- $g := .Values.gateway }}
{{- $embedded := 0 }}
{{- range .Values.models }}{{ if eq .backend.type "embedded" }}{{ $embedded = add1 $embedded }}{{ end }}{{ end }}
{{- $settle := addf 3.5 (mulf 8 (ternary 0.5 .Values.redis.timeoutSeconds (or (kindIs "invalid" .Values.redis.timeoutSeconds) (not (include "llm-gateway.redisEnabled" .))))) }}
{{- $exit := addf (mul $embedded 10) $settle 3 1 }}
{{- addf $g.drain.delaySeconds (include "llm-gateway.drainTimeoutSeconds" .) $exit $g.terminationGraceMarginSeconds | ceil | int64 }}
{{- end }}

{{/* The HTTPRoute's timeouts {request, backendRequest}: the values', else the longest a request may take in the
gateway (above), so that the gateway's own deadline answers first and a long stream is never cut by the
implementation's default (Envoy's is 15 s). backendRequest (one try from the Gateway to a gateway pod) defaults to
the request timeout, never above it. */}}
{{- define "llm-gateway.routeTimeouts" -}}
{{- $route := .Values.httpRoute }}
{{- $request := $route.requestTimeout }}
{{- if not $request }}
{{- $s := include "llm-gateway.longestRequestSeconds" (dict "ctx" . "policyQueues" true) | int64 }}
{{- $request = ternary (printf "%ds" $s) (printf "%dh%dm%ds" (div $s 3600) (div (mod $s 3600) 60) (mod $s 60)) (lt $s 100000) }}
{{- end }}
{{- $backend := $route.backendRequestTimeout | default $request }}
{{- $requestMs := include "llm-gateway.durationMs" $request | int64 }}
{{- if and (gt $requestMs 0) (gt (include "llm-gateway.durationMs" $backend | int64) $requestMs) }}
{{- fail (printf "httpRoute: backendRequestTimeout %s is longer than the request timeout %s (Gateway API refuses the route)" $backend $request) }}
{{- end }}
{{- toYaml (dict "request" $request "backendRequest" $backend) }}
{{- end }}

{{/* A memory quantity (128Mi, 1G, 268435456) in bytes; empty for a form it does not know. */}}
{{- define "llm-gateway.quantityBytes" -}}
{{- $q := toString . }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $unit := trimPrefix $number $q }}
{{- if and $number (hasKey $units $unit) }}{{ mulf $number (get $units $unit) | floor | int64 }}{{ end }}
{{- end }}

{{/* Restricted pod security: non-root, RuntimeDefault seccomp, no service account token. The volumes' ownership is
changed only when their root's differs (a model volume of many gigabytes is not walked at every start). */}}
{{- define "llm-gateway.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "llm-gateway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* HTTP probes; call with (dict "probe" .Values.gateway.probes.liveness "path" "/health" "port" "http"). */}}
{{- define "llm-gateway.probe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
{{- toYaml .probe | nindent 0 }}
{{- end }}

{{- define "llm-gateway.redisURL" -}}
{{- if and .Values.redis.enabled .Values.redis.url }}
{{- fail "redis: set either redis.enabled (the in-chart Redis) or redis.url (an external one), not both" }}
{{- end }}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s-redis.%s.svc.%s:%d/0" (include "llm-gateway.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.redis.port) }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}

{{/* The gateway's `gateway serve` arguments. */}}
{{- define "llm-gateway.args" -}}
{{- $g := .Values.gateway }}
{{- $args := list "serve" "--host" "0.0.0.0" "--port" (toString $g.port) "--config" "/etc/llm-gateway/config/gateway.yaml" }}
{{- $args = concat $args (list "--drain-delay" (toString $g.drain.delaySeconds) "--drain-timeout" (include "llm-gateway.drainTimeoutSeconds" .)) }}
{{- $args = concat $args (list "--log-level" $g.logLevel) }}
{{- if .Values.policies.enabled }}
{{- $args = concat $args (list "--policies" .Values.policies.mountPath) }}
{{- else if $g.allowUnauthenticated }}
{{- $args = append $args "--allow-unauthenticated" }}
{{- else }}
{{- fail "gateway: without policies.enabled the gateway refuses to serve other hosts; enable policies or set gateway.allowUnauthenticated=true" }}
{{- end }}
{{- /* The Redis URL and password reach the gateway in its environment (LLM_GATEWAY_REDIS_*), never in argv. */}}
{{- if include "llm-gateway.redisEnabled" . }}
{{- if not (kindIs "invalid" .Values.redis.timeoutSeconds) }}{{ $args = concat $args (list "--redis-timeout" (toString .Values.redis.timeoutSeconds)) }}{{ end }}
{{- end }}
{{- with $g.auditLogFile }}
{{- if not $.Values.policies.enabled }}
{{- fail "gateway.auditLogFile: audit lines are written only with tenant policies (policies.enabled); the gateway refuses --audit-log without --policies" }}
{{- end }}
{{- $args = concat $args (list "--audit-log" .) }}
{{- end }}
{{- if not (kindIs "invalid" $g.maxBodyBytes) }}{{ $args = concat $args (list "--max-body-bytes" (toString (int64 $g.maxBodyBytes))) }}{{ end }}
{{- if not (kindIs "invalid" $g.maxConcurrency) }}{{ $args = concat $args (list "--max-concurrency" (toString (int64 $g.maxConcurrency))) }}{{ end }}
{{- if not (kindIs "invalid" $g.headerTimeoutSeconds) }}{{ $args = concat $args (list "--header-timeout" (toString $g.headerTimeoutSeconds)) }}{{ end }}
{{- if not (kindIs "invalid" $g.bodyMinRateBytes) }}{{ $args = concat $args (list "--body-min-rate" (toString $g.bodyMinRateBytes)) }}{{ end }}
{{- if not (kindIs "invalid" $g.sendTimeoutSeconds) }}{{ $args = concat $args (list "--send-timeout" (toString $g.sendTimeoutSeconds)) }}{{ end }}
{{- if not (kindIs "invalid" $g.grammarCompileBudgetSeconds) }}{{ $args = concat $args (list "--grammar-compile-budget" (toString $g.grammarCompileBudgetSeconds)) }}{{ end }}
{{- if eq $g.proxyHeaders false }}
{{- if $g.forwardedAllowIps }}
{{- fail "gateway.forwardedAllowIps names the proxies whose X-Forwarded-* headers count: it needs gateway.proxyHeaders=true (the gateway refuses --forwarded-allow-ips with --no-proxy-headers)" }}
{{- end }}
{{- $args = append $args "--no-proxy-headers" }}
{{- else if $g.forwardedAllowIps }}
{{- $args = concat $args (list "--forwarded-allow-ips" $g.forwardedAllowIps) }}
{{- end }}
{{- if gt (int (default 1 $g.workers)) 1 }}
{{- if and .Values.policies.enabled (not (include "llm-gateway.redisEnabled" .)) }}
{{- fail "gateway.workers > 1 with policies.enabled needs Redis (redis.enabled or redis.url): each gateway process would count the tenant limits on its own" }}
{{- end }}
{{- $args = concat $args (list "--workers" (toString (int $g.workers))) }}
{{- end }}
{{- $passed := $args }}
{{- if include "llm-gateway.redisEnabled" . }}{{ $passed = append $passed "--redis" }}{{ end }}
{{- include "llm-gateway.refuseRepeatedFlags" (dict "where" "gateway.extraArgs" "args" $passed "extra" $g.extraArgs) }}
{{- /* Flags whose value the pod must be built for (a mounted directory, a writable folder, Redis for a group):
passed alone, the gateway would refuse to start or fail at its first write. */}}
{{- $owned := dict "--policies" "policies.enabled (the chart mounts the directory)" "--audit-log" "gateway.auditLogFile (the chart mounts a writable folder for it)" "--workers" "gateway.workers (the chart checks that a group with policies has Redis)" }}
{{- if not (include "llm-gateway.redisEnabled" .) }}{{ $_ := set $owned "--redis-timeout" "redis.timeoutSeconds with a Redis (the gateway refuses it without --redis)" }}{{ end }}
{{- range $g.extraArgs }}
{{- with get $owned (first (splitList "=" (toString .))) }}
{{- fail (printf "gateway.extraArgs: set %s instead" .) }}
{{- end }}
{{- end }}
{{- toYaml (concat $args $g.extraArgs) }}
{{- end }}

{{/* Fails when `extra` names a flag that `args` (what the chart passes) already has: the program takes the last
one, so the pod would listen on another port than its probes, drain past its grace period, read another config. */}}
{{- define "llm-gateway.refuseRepeatedFlags" -}}
{{- range $arg := .extra }}
{{- $flag := first (splitList "=" (toString $arg)) }}
{{- if and (hasPrefix "--" $flag) (has $flag $.args) }}
{{- fail (printf "%s: %s is already passed by the chart; set the value it comes from instead (helm/llm-gateway/README.md), since the last %s would win over it" $.where $flag $flag) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The volume source of the model files: an existing claim or the given source. */}}
{{- define "llm-gateway.modelVolume" -}}
{{- if .Values.modelStorage.existingClaim }}
persistentVolumeClaim:
  claimName: {{ .Values.modelStorage.existingClaim }}
  readOnly: true
{{- else if .Values.modelStorage.volume }}
{{- toYaml .Values.modelStorage.volume }}
{{- else }}
{{- fail "modelStorage.enabled needs modelStorage.existingClaim or modelStorage.volume" }}
{{- end }}
{{- end }}

{{/* Fails when two volumes of a container would mount at one path (the API server refuses the pod). */}}
{{- define "llm-gateway.distinctMounts" -}}
{{- $seen := dict }}
{{- range .paths }}
{{- $path := trimSuffix "/" . }}
{{- if hasKey $seen $path }}
{{- fail (printf "%s: two volumes would mount at %s; extraVolumeMounts, policies.mountPath, modelStorage.mountPath and the folder of gateway.auditLogFile must differ from each other and from the chart's /etc/llm-gateway/config, /tmp and /dev/shm" $.where $path) }}
{{- end }}
{{- $_ := set $seen $path true }}
{{- end }}
{{- end }}

{{/* A container's extra volumes and mounts, checked against the chart's own: call with (dict "where" "gateway"
"volumes" list "mounts" list "names" (the chart's volume names) "paths" (the chart's mount paths)). */}}
{{- define "llm-gateway.checkExtraVolumes" -}}
{{- $names := .names }}
{{- range .volumes }}
{{- if has .name $names }}
{{- fail (printf "%s.extraVolumes: a volume named %s is already there (the chart's are %s); pick another name" $.where .name (join ", " $.names)) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- $paths := .paths }}
{{- range .mounts }}
{{- if not (has .name $names) }}
{{- fail (printf "%s.extraVolumeMounts: no volume named %s (add it to %s.extraVolumes)" $.where .name $.where) }}
{{- end }}
{{- $paths = append $paths .mountPath }}
{{- end }}
{{- include "llm-gateway.distinctMounts" (dict "where" .where "paths" $paths) }}
{{- end }}

{{/* A container's environment: the chart's variables, less those extraEnv sets again, then extraEnv (one entry per
name: server-side apply refuses a list with two, and the second would silently win otherwise). */}}
{{- define "llm-gateway.env" -}}
{{- $extra := .extra | default list }}
{{- $names := list }}
{{- range $extra }}{{ $names = append $names .name }}{{ end }}
{{- $env := list }}
{{- range .env }}{{ if not (has .name $names) }}{{ $env = append $env . }}{{ end }}{{ end }}
{{- toYaml (concat $env $extra) }}
{{- end }}
