/** Names for the generated OpenAPI schemas the pages use (all types come from `schema.d.ts`). */
import type { components } from "./schema";

export type Schemas = components["schemas"];

export type Me = Schemas["MeResponse"];
export type Team = Schemas["TeamPublic"];
export type Job = Schemas["JobPublic"];
export type JobSpec = Schemas["JobSpec"];
export type JobStatus = Job["status"];
export type JobEvent = Schemas["JobEventPublic"];
export type Iteration = Schemas["IterationPublic"];
export type SampleRow = Schemas["SamplePublic"];
export type TimelineSpan = Schemas["TimelinePublic"]["spans"][number]; // by path: two schemas are named SpanPublic
export type Dataset = Schemas["DatasetPublic"];
export type Model = Schemas["ModelPublic"];
export type ApiKey = Schemas["ApiKeyPublic"];
export type Member = Schemas["MemberPublic"];
export type PlanRequest = Schemas["PlanRequest"];
export type Plan = Schemas["PlanPublic"];
export type Prediction = Schemas["PredictionPublic"];
export type Device = Schemas["DevicePublic"];

export const JOB_STATUSES: readonly JobStatus[] = ["queued", "starting", "running", "paused", "parked", "succeeded", "failed", "cancelled"];

/** `JobPublic.spec` is an open dict in the schema; it holds a validated JobSpec. */
export function jobSpec(job: Job): JobSpec {
  return job.spec as unknown as JobSpec;
}
export type Run = Schemas["RunPublic"];
export type JobHealth = Schemas["JobHealth"];
export type HealthState = JobHealth["state"];
export type Checkpoint = Schemas["CheckpointPublic"];
export type PromptSummary = Schemas["PromptSummary"];
export type PromptSamples = Schemas["PromptSamplesPublic"];
export type IterationSamples = Schemas["IterationSamples"];
