// What the snippets take from the surrounding application. The snippet
// test provides each as a global: a scripted model, a run id, the user,
// the payment function and its parameters, (LangGraph) the graph,
// (ADK) the session, (Mastra) the storage and (receipts) the tool's
// Express app.
declare const runId: string;
declare const user: string;
declare const parameters: import('zod').ZodObject<{ amount: import('zod').ZodNumber; recipient: import('zod').ZodString }>;
// The tool function: each framework's own result type (a string, an MCP
// tool result, an object); the receipts snippet hands it the request body.
declare function sendPayment(args: any): Promise<any>;
declare const openaiModel: import('@openai/agents').Model;
declare const aiModel: import('ai').LanguageModel;
declare function buildGraph(parts: {
  approve: ReturnType<import('@countersign/client/langgraph').Gate['node']>;
  tools: import('@langchain/core/tools').StructuredToolInterface[];
}): {
  invoke(input: unknown, config: { configurable: { thread_id: string } }): Promise<unknown>;
  getState(config: { configurable: { thread_id: string } }): Promise<any>;
};
// ADK's model (a BaseLlm) and Mastra's (an AI SDK model): one object is
// each in its own snippet.
declare const model: import('@google/adk').BaseLlm & ConstructorParameters<typeof import('@mastra/core/agent').Agent>[0]['model'];
declare const sessionService: import('@google/adk').BaseSessionService;
declare const userId: string;
declare const sessionId: string;
declare const newMessage: Parameters<import('@google/adk').Runner['runAsync']>[0]['newMessage'];
declare const inputSchema: import('zod').ZodObject<{ amount: import('zod').ZodNumber; recipient: import('zod').ZodString }>;
declare const storage: import('@mastra/core/storage').MastraStorage;
declare const express: typeof import('express');
declare const app: import('express').Express;
