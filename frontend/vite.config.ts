import react from "@vitejs/plugin-react";

declare const process: { env: Record<string, string | undefined> };
import { defineConfig } from "vitest/config";

// The API serves dist/ at `/`; in `npm run dev` API calls are proxied to a local uvicorn (STREAMRL_API, default :8000).
export default defineConfig({
  plugins: [react()],
  server: {
    proxy: { "/api": process.env.STREAMRL_API ?? "http://127.0.0.1:8000" },
  },
  build: {
    outDir: "dist",
    chunkSizeWarningLimit: 600,
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
