/** Registered models come as every version of every name (GET /models: by name, newest version first); a job or a
 * preview names a model, which means its newest version: the choices offer each name once. */
export function newestVersions<M extends { name: string; version: number }>(models: M[]): M[] {
  const newest = new Map<string, M>();
  for (const model of models) {
    const seen = newest.get(model.name);
    if (!seen || model.version > seen.version) newest.set(model.name, model);
  }
  return models.filter((model) => newest.get(model.name) === model);
}
