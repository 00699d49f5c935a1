// What the snippets take from the surrounding application. The snippet
// test provides each as a global: a scripted model, a run id, the user,
// the payment function and its parameters, and (LangGraph) the graph.
declare const runId: string;
declare const user: string;
declare const parameters: import('zod').ZodObject<{ amount: import('zod').ZodNumber; recipient: import('zod').ZodString }>;
declare function sendPayment(args: { amount: number; recipient: string }): Promise<string>;
declare const openaiModel: import('@openai/agents').Model;
declare const aiModel: import('ai').LanguageModel;
declare function buildGraph(parts: {
  approve: ReturnType<import('@countersign/client/langgraph').Gate['node']>;
  tools: import('@langchain/core/tools').StructuredToolInterface[];
}): {
  invoke(input: unknown, config: { configurable: { thread_id: string } }): Promise<unknown>;
  getState(config: { configurable: { thread_id: string } }): Promise<any>;
};
